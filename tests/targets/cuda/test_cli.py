"""`tunehub compile` and `tunehub check` for CUDA, run as a user runs them (the installed
console script), and the exit status of a failed check (in process, with a failure faked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.client.test_cli import SIGNATURE, assert_user_error, tunehub
from tests.targets.cuda.cases import needs_nvcc
from tunehub.client.cli import cli
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda import check, device

SM80 = Target(kind="cuda", arch="sm_80")


@pytest.fixture(scope="module")
def signature_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cuda-cli") / "matmul.json"
    path.write_text(json.dumps(SIGNATURE))
    return path


@needs_nvcc
def test_compile_writes_source_cubin_and_metadata(signature_file: Path, tmp_path: Path) -> None:
    done = tunehub("compile", signature_file, "--target", "cuda", "--arch", "sm_80", "-o", tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert (
        lines[0]
        == f"wrote {tmp_path}/ (kernel.cu, kernel.cubin, metadata.json): cli_matmul for cuda:sm_80"
    )
    assert all(" registers, " in line and "B spilled" in line for line in lines[1:])
    assert (tmp_path / "kernel.cubin").read_bytes().startswith(b"\x7fELF")
    metadata = json.loads((tmp_path / "metadata.json").read_text())
    assert metadata["config"] == space_for(load(SIGNATURE), SM80).default()
    assert metadata["target"] == "cuda:sm_80" and metadata["symbols"] == ["M"]
    assert [k["entry"] for k in metadata["launch"]["kernels"]] == list(metadata["build"]["kernels"])
    assert metadata["launch"]["kernels"][0]["entry"] in (tmp_path / "kernel.cu").read_text()


@needs_nvcc
def test_compile_takes_a_config_and_writes_ptx(signature_file: Path, tmp_path: Path) -> None:
    config = space_for(load(SIGNATURE), SM80).naive()
    done = tunehub(
        "compile", signature_file, "--config", json.dumps(config), "--ptx", "-o", tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "metadata.json").read_text())["config"] == config
    assert ".entry" in (tmp_path / "kernel.ptx").read_text()


@needs_nvcc
def test_compile_takes_a_seed_by_index(signature_file: Path, tmp_path: Path) -> None:
    seeds = space_for(load(SIGNATURE), Target(kind="cuda", arch="sm_90")).seeds()
    done = tunehub("compile", signature_file, "--seed", str(len(seeds) - 1), "-o", tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "metadata.json").read_text())["config"] == seeds[-1]
    assert_user_error(
        tunehub("compile", signature_file, "--seed", str(len(seeds)), "-o", tmp_path),
        f"the space has {len(seeds)} seeds",
    )
    assert_user_error(
        tunehub("compile", signature_file, "--seed", "0", "--config", "{}", "-o", tmp_path),
        "not both",
    )
    # The seeds of a tuning at M = 1: GEMV shapes only.
    few = space_for(load(SIGNATURE), Target(kind="cuda", arch="sm_90")).seeds({"M": 1})
    assert few[-1] not in seeds
    last = str(len(few) - 1)
    done = tunehub("compile", signature_file, "--seed", last, "--symbol", "M=1", "-o", tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "metadata.json").read_text())["config"] == few[-1]
    assert_user_error(
        tunehub("compile", signature_file, "--seed", "0", "--symbol", "Q=1", "-o", tmp_path),
        "unknown symbol Q",
    )
    assert_user_error(
        tunehub("compile", signature_file, "--symbol", "M=1", "-o", tmp_path), "with --seed"
    )


def test_compile_refuses_bad_configs_and_archs(signature_file: Path, tmp_path: Path) -> None:
    assert_user_error(
        tunehub("compile", signature_file, "--config", '{"nope": 1}', "-o", tmp_path),
        "invalid config",
    )
    assert_user_error(
        tunehub("compile", signature_file, "--config", "[1", "-o", tmp_path), "not JSON"
    )
    assert_user_error(
        tunehub("compile", signature_file, "--arch", "sm_9", "-o", tmp_path), "unknown cuda arch"
    )


def test_check_emulates_random_candidates(signature_file: Path) -> None:
    done = tunehub(
        "check",
        signature_file,
        "--target",
        "cuda",
        "--emulate",
        "--samples",
        "2",
        "--symbol",
        "M=3",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "cli_matmul on cuda:sm_90 (emulated, M=3): 2 candidates"
    assert lines[1].startswith("#0 ok") and lines[2].startswith("#1 ok")
    assert "max err" in lines[1] and '"' in lines[1]  # the error and the config
    assert lines[-1] == "2 of 2 passed"


def test_check_runs_the_configs_it_is_given(signature_file: Path) -> None:
    space = space_for(load(SIGNATURE), Target(kind="cuda", arch="sm_90"))
    configs = [space.naive(), space.seeds()[0]]
    given = [arg for config in configs for arg in ("--config", json.dumps(config))]
    done = tunehub("check", signature_file, "--emulate", "--symbol", "M=2", *given)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].endswith(": 2 candidates") and lines[-1] == "2 of 2 passed"
    assert [json.loads(line[line.index("{") :]) for line in lines[1:3]] == configs
    assert_user_error(
        tunehub("check", signature_file, "--emulate", "--config", '{"nope": 1}'), "invalid config"
    )


def test_check_refuses_unknown_symbols(signature_file: Path) -> None:
    assert_user_error(
        tunehub("check", signature_file, "--emulate", "--symbol", "Q=3"), "unknown symbol Q"
    )
    assert_user_error(
        tunehub("check", signature_file, "--emulate", "--symbol", "M=999"), "outside its range"
    )


@pytest.mark.skipif(bool(device.gpus()), reason="this machine has a GPU")
def test_check_without_a_gpu_asks_for_emulation(signature_file: Path) -> None:
    assert_user_error(tunehub("check", signature_file), "use --emulate")


def test_a_failed_candidate_fails_the_check(
    signature_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(
        program: object, target: Target, configs: list[dict], symbols: dict, **_: object
    ) -> list[check.Checked]:
        return [
            check.Checked(configs[0], RecordStatus.OK, max_error=0.0, build_s=1.0, run_s=2.0),
            check.Checked(
                configs[1], RecordStatus.WRONG_ANSWER, "C: 3 of 24 elements differ", build_s=1.0
            ),
        ]

    monkeypatch.setattr(check, "check_configs", failing)
    result = CliRunner().invoke(cli, ["check", str(signature_file), "--emulate", "--samples", "2"])
    assert result.exit_code == 1, result.output
    failed = result.output.splitlines()[2]
    assert failed.startswith("#1 wrong_answer ") and "C: 3 of 24 elements differ" in failed
    assert result.output.strip().endswith("1 of 2 passed")
