"""Dynamic shapes end to end: tune a symbolic workload at several values (`--symbol M=1,16`),
export its dispatch table and kernels (`kernel --dispatch` from the local database, `download
--dispatch` from the service), and call the result on any M as one kernel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tests.cli_process import run_tunehub
from tests.e2e.conftest import Service
from tests.signatures import row_matmul
from tunehub.client import load_kernel
from tunehub.runtime.dispatch import DispatchKernel, served_ranges
from tunehub.schemas.dispatch import DispatchTable
from tunehub.worker import device

SIGNATURE: dict[str, Any] = row_matmul("dispatch_matmul", k=16, n=8, max_m=128)
TUNED = (1, 16)
# Which tuned value serves each M: the nearest on a log scale, a tie to the larger (M=4).
SERVED_BY = {1: 1, 3: 1, 4: 16, 5: 16, 16: 16, 100: 16, 128: 16}
# Each task's first batch is a whole batch (the local tuner's: at least 8, 2 per core), and a
# task without one has no kernel to dispatch to.
LOCAL_TRIALS = len(TUNED) * max(8, 2 * device.cpu_cores())
# The service's tuner batches 8 with the fixture's two workers.
SERVICE_TRIALS = len(TUNED) * 8


def check_dispatch(out: Path) -> None:
    """`out` is a dispatch directory of SIGNATURE tuned at TUNED: every M runs the entry
    `select` picks, and computes what numpy does."""
    table = DispatchTable.model_validate_json((out / "dispatch.json").read_text())
    assert [entry.symbols for entry in table.entries] == [{"M": m} for m in TUNED]
    assert served_ranges(table) == {0: (1, 3), 1: (4, 128)}
    kernel = load_kernel(out)
    assert isinstance(kernel, DispatchKernel)
    rng = np.random.default_rng(0)
    b = rng.standard_normal((16, 8), dtype=np.float32)
    for m, tuned in SERVED_BY.items():
        a = rng.standard_normal((m, 16), dtype=np.float32)
        assert kernel.entry(a, b) == table.select({"M": m})
        assert kernel.entry(a, b).symbols == {"M": tuned}
        np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_tune_values_locally_export_the_dispatch_and_call_it(tmp_path: Path) -> None:
    sig = tmp_path / "matmul.json"
    sig.write_text(json.dumps(SIGNATURE))
    db = f"sqlite:///{tmp_path / 'tunehub.db'}"
    symbol = "M=" + ",".join(map(str, TUNED))
    done = run_tunehub("tune", sig, "--symbol", symbol, "--trials", LOCAL_TRIALS, "--target", "cpu",
                       "--json", "--db", db)  # fmt: skip
    assert done.returncode == 0, done.stderr
    tasks = json.loads(done.stdout)["tasks"]
    assert [task["symbols"] for task in tasks] == [{"M": m} for m in TUNED]
    assert all(task["best"] is not None for task in tasks)
    key = tasks[0]["workload_key"]

    out = tmp_path / "dispatch"
    done = run_tunehub("kernel", key, "--target", "cpu", "--dispatch", "-o", out, "--db", db)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {out}/ (dispatch.json")
    assert "M=1..3" in done.stdout and "M=4..128" in done.stdout
    check_dispatch(out)


def test_submit_values_to_the_service_and_download_the_dispatch(
    service: Service, tmp_path: Path
) -> None:
    sig = tmp_path / "matmul.json"
    sig.write_text(json.dumps({**SIGNATURE, "name": "dispatch_matmul_remote"}))
    server = ("--server", service.url)
    symbol = "M=" + ",".join(map(str, TUNED))
    done = run_tunehub("submit", sig, "--symbol", symbol, "--trials", SERVICE_TRIALS, "--wait",
                       "--json", *server)  # fmt: skip
    assert done.returncode == 0, done.stderr
    group = json.loads(done.stdout)
    assert group["status"] == "done", group
    assert [t["symbols"] for t in group["tunings"]] == [{"M": m} for m in TUNED]
    key = group["tunings"][0]["workload_key"]

    out = tmp_path / "dispatch"
    done = run_tunehub("download", key, "--dispatch", "-o", out, *server)
    assert done.returncode == 0, done.stderr
    assert "M=4..128" in done.stdout
    check_dispatch(out)

    missing = run_tunehub("download", "0" * 64, "--dispatch", "-o", tmp_path / "none", *server)
    assert missing.returncode == 2 and missing.stderr.startswith("error: GET /v1/workloads/")
