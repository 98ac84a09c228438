"""docker-compose.yml and the Dockerfile: the services a deployment needs, wired to each other
and to commands that exist. `docker compose config` validates the file where the compose
plugin is installed; the structural checks run everywhere."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tunehub.client.cli import cli

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
TUNEHUB = {"api", "tuner", "worker-cpu", "worker-gpu"}


def command_text(service: str) -> str:
    command = SERVICES[service]["command"]
    return command if isinstance(command, str) else " ".join(command)


def tunehub_commands(service: str) -> list[str]:
    return re.findall(r"\btunehub ([a-z-]+)", command_text(service))


def test_every_service_of_a_deployment_is_there() -> None:
    assert set(SERVICES) == {"redis", "postgres", *TUNEHUB}
    assert SERVICES["redis"]["image"].startswith("redis:")
    assert SERVICES["postgres"]["image"].startswith("postgres:")
    for name in TUNEHUB:
        assert SERVICES[name]["build"], name


@pytest.mark.parametrize("service", sorted(TUNEHUB))
def test_commands_are_real_tunehub_commands(service: str) -> None:
    commands = tunehub_commands(service)
    assert commands, command_text(service)
    for command in commands:
        result = CliRunner().invoke(cli, [command, "--help"])
        assert result.exit_code == 0, (command, result.output)


def test_the_api_migrates_first_and_serves_with_tokens_on_all_interfaces() -> None:
    assert tunehub_commands("api") == ["migrate", "api"]
    assert "--host 0.0.0.0" in command_text("api")
    assert SERVICES["api"]["environment"]["TUNEHUB_AUTH"] == "token"
    assert any(str(port).endswith(":8000") for port in SERVICES["api"]["ports"])
    assert SERVICES["api"]["healthcheck"]["test"]


def test_only_the_api_and_the_tuner_hold_database_credentials() -> None:
    for name in ("api", "tuner"):
        env = SERVICES[name]["environment"]
        assert env["TUNEHUB_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert "@postgres:5432/" in env["TUNEHUB_DATABASE_URL"]
        assert env["TUNEHUB_REDIS_URL"] == "redis://redis:6379/0"
    for name in ("worker-cpu", "worker-gpu"):
        env = SERVICES[name]["environment"]
        assert env == {"TUNEHUB_REDIS_URL": "redis://redis:6379/0"}, name


def test_services_start_after_what_they_need() -> None:
    def needs(name: str) -> dict[str, str]:
        return {k: v["condition"] for k, v in SERVICES[name]["depends_on"].items()}

    assert needs("api") == {"postgres": "service_healthy", "redis": "service_healthy"}
    assert needs("tuner") == {"api": "service_healthy", "redis": "service_healthy"}
    assert needs("worker-cpu") == needs("worker-gpu") == {"redis": "service_healthy"}
    for name in ("redis", "postgres"):
        assert SERVICES[name]["healthcheck"]["test"], name


def test_the_gpu_worker_reserves_nvidia_gpus_and_builds_on_a_cuda_devel_image() -> None:
    gpu = SERVICES["worker-gpu"]
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    base = gpu["build"]["args"]["BASE_IMAGE"]
    assert base.startswith("nvidia/cuda:13.0.") and "-devel-" in base
    assert gpu["profiles"] == ["gpu"]  # opt-in: hosts without GPUs run the rest
    assert "deploy" not in SERVICES["worker-cpu"]


def test_the_dockerfile_switches_its_base_and_installs_gcc_openmp_and_the_project() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim" in dockerfile
    assert "FROM ${BASE_IMAGE}" in dockerfile
    assert all(package in dockerfile for package in ("gcc", "libgomp1"))
    assert 'pip install ".[all]"' in dockerfile  # the whole service: every extra
    assert "\nUSER " in dockerfile
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def _compose() -> list[str] | None:
    """The compose command: the docker plugin, else the standalone `docker-compose`."""
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    return [standalone] if standalone else None


def test_docker_compose_accepts_the_file() -> None:
    compose = _compose()
    if compose is None:
        pytest.skip("neither the docker compose plugin nor docker-compose is installed")
    done = subprocess.run(
        [*compose, "--profile", "gpu", "config", "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
