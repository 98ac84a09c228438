"""The `tunehub` console script, run as a user runs it (a subprocess of the installed script)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.signatures import row_matmul
from tunehub.client import load_kernel
from tunehub.compiler.canonical import workload_key
from tunehub.compiler.program import load
from tunehub.server.best import best_record
from tunehub.server.db.session import make_engine, session_factory

TUNEHUB = Path(sys.executable).parent / "tunehub"  # `pip install -e .` puts it beside python
EXAMPLES = Path(__file__).parents[2] / "examples"

SIGNATURE = row_matmul("cli_matmul", k=16, n=8, max_m=128)


def tunehub(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert TUNEHUB.exists(), "run `.venv/bin/pip install -e '.[dev]'` to get the console script"
    return subprocess.run(
        [str(TUNEHUB), *map(str, args)], capture_output=True, text=True, timeout=300
    )


def assert_user_error(done: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert fragment in lines[0]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One small tuning (`tune --json`), shared by the tests that read its database."""
    tmp = tmp_path_factory.mktemp("cli")
    signature = tmp / "matmul.json"
    signature.write_text(json.dumps(SIGNATURE))
    db = f"sqlite:///{tmp / 'tunehub.db'}"
    done = tunehub("tune", signature, "--trials", "4", "--symbol", "M=24", "--json", "--db", db)
    assert done.returncode == 0, done.stderr
    return {"signature": signature, "db": db, "result": json.loads(done.stdout), "tmp": tmp}


def test_validate_prints_the_workload_key() -> None:
    path = EXAMPLES / "matmul_128.json"
    done = tunehub("validate", path)
    assert done.returncode == 0, done.stderr
    assert f"workload key: {workload_key(load(path.read_text()))}" in done.stdout


def test_validate_rejects_bad_input_in_one_line(tmp_path: Path) -> None:
    assert_user_error(tunehub("validate", tmp_path / "missing.json"), "cannot read")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    assert_user_error(tunehub("validate", bad_json), "invalid JSON")
    unknown_tensor = tmp_path / "unknown.json"
    broken = json.loads(json.dumps(SIGNATURE))
    broken["computes"][0]["expr"] = "A[i, k] * D[k, j]"
    unknown_tensor.write_text(json.dumps(broken))
    assert_user_error(tunehub("validate", unknown_tensor), "unknown.json")


def test_schema_is_the_signature_json_schema() -> None:
    done = tunehub("schema")
    assert done.returncode == 0
    schema = json.loads(done.stdout)
    assert {"inputs", "computes", "outputs", "symbols"} <= set(schema["properties"])


def test_tune_json_reports_baseline_best_and_failures(tuned: dict[str, Any]) -> None:
    result = tuned["result"]
    assert result["workload_key"] == workload_key(load(SIGNATURE))
    assert result["target"].startswith("cpu:")
    assert result["trials"] == 4 and result["symbols"] == {"M": 24}
    assert result["baseline_latency_s"] > 0
    best = result["best"]
    assert 0 < best["latency_s"] <= result["baseline_latency_s"]
    assert len(best["artifact"]) == 64 and isinstance(best["config"], dict)
    assert isinstance(result["failures"], dict) and isinstance(result["tuning_id"], int)
    # numpy (and torch where installed) on as many threads, beside the tuned kernel: the
    # libraries the user already has, the fastest first and compared, each with its code
    libraries = result["libraries"]
    assert "numpy" in [b["library"] for b in libraries] and result["library"] == libraries[0]
    assert sorted(libraries, key=lambda b: b["latency_s"]) == libraries
    assert all(b["latency_s"] > 0 and " = " in b["code"] for b in libraries)
    assert result["vs_library"] == libraries[0]["latency_s"] / best["latency_s"]


def test_explain_names_stages_schedules_and_knobs() -> None:
    done = tunehub("explain", EXAMPLES / "int4_matmul.json", "--target", "cpu:x86_64-avx2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "target cpu:x86_64-avx2"
    assert lines[1] == "stage 0: contraction acc -> out"
    assert "applied as stored: out" in done.stdout
    assert "schedule PackedGemm: the packed GEMM template" in done.stdout
    assert "each term rounded" not in done.stdout  # the inline form sums in float32
    knob = next(line for line in lines if line.strip().startswith("s0.mr"))
    assert "rows of the register tile" in knob and "default 6" in knob
    verbose = tunehub("validate", EXAMPLES / "softmax.json", "--verbose").stdout.splitlines()
    assert sum(line.startswith("stage ") for line in verbose) == 3


def test_explain_says_which_sums_make_a_variance_in_one_pass() -> None:
    done = tunehub("explain", EXAMPLES / "layernorm.json", "--target", "cpu:x86_64-avx2")
    assert done.returncode == 0, done.stderr
    assert "stage 0: reduction sq_dev_shifted -> workspace" in done.stdout
    assert done.stdout.count("one pass: a sum sq_dev is made of, needing no other") == 2
    assert done.stdout.count("gives row_sum too") == 1
    assert "inlined where read: sq_dev\n" in done.stdout


def test_explain_says_which_sum_keeps_its_terms() -> None:
    done = tunehub("explain", EXAMPLES / "softmax.json", "--target", "cpu:x86_64-avx2")
    assert done.returncode == 0, done.stderr
    assert "keeps its terms in Y, which reads them back" in done.stdout
    cuda = tunehub("explain", EXAMPLES / "softmax.json", "--target", "cuda:sm_90")
    assert cuda.returncode == 0, cuda.stderr
    assert "keeps its terms" not in cuda.stdout


def test_explain_says_why_a_stage_gets_no_packed_template(tmp_path: Path) -> None:
    maxed = json.loads(json.dumps(SIGNATURE))
    maxed["computes"][0]["reduce"]["op"] = "max"
    path = tmp_path / "max.json"
    path.write_text(json.dumps(maxed))
    done = tunehub("explain", path)
    assert done.returncode == 0, done.stderr
    assert "schedule Reduction:" in done.stdout


def test_tune_again_resumes_and_prints_a_table(tuned: dict[str, Any]) -> None:
    done = tunehub("tune", tuned["signature"], "--trials", "2", "--symbol", "M=24",
                   "--db", tuned["db"], "--strategy", "random")  # fmt: skip
    assert done.returncode == 0, done.stderr
    for label in ("naive", "best", "speedup", "GFLOP/s", "failures", "2 of 2 (random)"):
        assert label in done.stdout
    assert "tuning" in done.stderr  # the progress bar


def test_tune_rejects_bad_options_in_one_line(tuned: dict[str, Any]) -> None:
    sig, db = tuned["signature"], tuned["db"]
    assert_user_error(tunehub("tune", sig, "--symbol", "M=1000", "--db", db), "outside its range")
    assert_user_error(tunehub("tune", sig, "--symbol", "M", "--db", db), "NAME=INTEGER")
    assert_user_error(tunehub("tune", sig, "--target", "tpu", "--db", db), "unknown target")


def test_kernel_export_runs_like_numpy(tuned: dict[str, Any]) -> None:
    out = tuned["tmp"] / "kernel"
    key = tuned["result"]["workload_key"]
    done = tunehub("kernel", key, "--target", "cpu", "-o", out, "--symbol", "M=24",
                   "--db", tuned["db"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["workload_key"] == key and metadata["tuned_symbols"] == {"M": 24}
    # The best at export time: a later tuning of this module's database may beat the first.
    engine = make_engine(tuned["db"])
    with session_factory(engine)() as s:
        best = best_record(s, workload_key=key, target="cpu", symbols={"M": 24})
    engine.dispose()
    assert best is not None and metadata["config"] == best.config
    assert (out / "kernel.c").read_text()
    kernel = load_kernel(out)
    rng = np.random.default_rng(0)
    for m in (24, 5):  # the symbol comes from the input's shape, tuned value or not
        a = rng.standard_normal((m, 16), dtype=np.float32)
        b = rng.standard_normal((16, 8), dtype=np.float32)
        np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_kernel_without_a_result_is_a_user_error(tuned: dict[str, Any]) -> None:
    out, db = tuned["tmp"] / "none", tuned["db"]
    key = tuned["result"]["workload_key"]
    assert_user_error(tunehub("kernel", "0" * 64, "-o", out, "--db", db), "unknown workload")
    assert_user_error(
        tunehub("kernel", key, "-o", out, "--symbol", "M=7", "--db", db), "no verified kernel"
    )
