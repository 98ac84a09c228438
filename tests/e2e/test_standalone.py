"""`tunehub standalone` and `tunehub demo` as a user runs them: real commands, real processes,
and nothing left running after Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli_process import tunehub_argv
from tests.e2e.conftest import example
from tests.service.redis_server import redis_server_binary
from tunehub.client.sdk import Client

TIMEOUT_S = 240
pytestmark = pytest.mark.skipif(redis_server_binary() is None, reason="no redis-server on PATH")


def processes_of(home: Path) -> list[int]:
    """Pids of the living processes that belong to a stack in `home`: the environment names
    it (TUNEHUB_HOME), or, for redis-server (which overwrites its environment with its process
    title), the working directory is inside it."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        if proc.name == str(os.getpid()):
            continue
        try:
            stat = (proc / "stat").read_text()
            ours = str(home).encode() in (proc / "environ").read_bytes()
            ours = ours or (proc / "cwd").resolve().is_relative_to(home)
        except OSError:
            continue
        if ours and stat[stat.rfind(")") + 2] != "Z":  # zombies are already dead
            found.append(int(proc.name))
    return found


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "standalone-home"
    yield home
    for pid in processes_of(home):  # only if a test failed: leave nothing behind
        os.kill(pid, signal.SIGKILL)


def test_standalone_serves_until_ctrl_c_and_leaves_nothing_running(home: Path) -> None:
    env = {**os.environ, "TUNEHUB_HOME": str(home)}
    env.pop("TUNEHUB_DATABASE_URL", None)
    proc = subprocess.Popen(
        tunehub_argv("standalone", "--port", "0"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith("tunehub is serving at "), first + proc.stdout.read()
    url = first.split()[4]
    assert httpx.get(f"{url}/readyz").json()["ready"] is True
    with Client(url) as client:
        (worker,) = client.workers()
        assert worker.name.startswith("standalone-")
    # Its database is the home's (the embedded default).
    assert (home / "tunehub.db").exists()
    running = processes_of(home)
    assert len(running) == 5  # itself, redis-server, the API, the tuner, the worker

    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    assert processes_of(home) == []


def test_demo_tunes_downloads_and_checks_the_kernel(home: Path) -> None:
    env = {**os.environ, "TUNEHUB_HOME": str(home)}
    done = subprocess.run(
        tunehub_argv("demo", "--trials", "6"),
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert "submitted matmul_128.json over HTTP: tuning 1 created" in out
    assert "naive" in out and "speedup" in out
    assert "numpy arrays: C matches the reference" in out
    assert processes_of(home) == []
    logs = home / "demo" / "logs"  # kept where the demo said, after it
    assert f"logs in {logs}" in out and (logs / "api.log").is_file()


def test_demo_refuses_a_missing_signature(tmp_path: Path) -> None:
    done = subprocess.run(
        tunehub_argv("demo", str(tmp_path / "nothing.json")), capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: no signature at")
    assert example("matmul_128").exists()  # what it runs by default


def test_demo_on_a_target_no_worker_serves_says_so_in_one_line(home: Path) -> None:
    """The GPU service check (`scripts/gpu_checks service`) is this demo with `--target cuda`;
    on a machine without a GPU its tuning fails, and the demo says why, without a traceback."""
    done = subprocess.run(
        tunehub_argv("demo", "--target", "cuda", "--trials", "2"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "TUNEHUB_HOME": str(home)},
    )
    assert done.returncode != 0
    assert "no living worker serves a cuda target" in done.stderr
    assert "Traceback" not in done.stderr
