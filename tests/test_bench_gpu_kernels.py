"""`bench/gpu_kernels.py` on a machine without a GPU: one clear line and a failing exit, before
it tunes or imports anything heavy; and its per-mode summary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tunehub.targets.cuda import device

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu_kernels.py"


@pytest.mark.skipif(bool(device.gpus()), reason="this machine has a GPU")
def test_without_a_gpu_it_exits_with_one_clear_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "gpu_kernels: no CUDA GPU visible to cuda-python here; run it on a GPU machine"
    ]
    assert not any(tmp_path.iterdir())


def test_the_report_names_each_kernel_modes_best() -> None:
    from bench.gpu_kernels import best_by_mode

    measured = [
        ({"s0.mode": "wgmma", "s0.bm": 128}, 2e-4),
        ({"s0.mode": "wgmma", "s0.bm": 64}, 3e-4),
        ({"s0.mode": "tiled", "s0.bm": 64}, 9e-4),
        ({"s0.mode": "wmma"}, None),  # failed: no latency
        ({"s0.group": 2, "s1.mode": "rows"}, 5e-4),
    ]
    assert best_by_mode(measured) == {"s0=wgmma": 2e-4, "s1=rows": 5e-4, "s0=tiled": 9e-4}
    assert best_by_mode([({"g0.fuse": True}, 1e-3)]) == {"-": 1e-3}


def test_the_report_checks_issue_14s_bars_where_both_sides_were_measured() -> None:
    from bench.gpu_kernels import (
        CUBLAS,
        CUBLAS_FP16,
        INT4_PEERS,
        READ_FLOOR,
        TRITON,
        TUNED,
        Result,
        bars,
    )

    def timed(workload: str, implementation: str, us: float) -> Result:
        return Result(workload, implementation, latency_s=us * 1e-6)

    results = [
        timed("gemm_fp16_4096", TUNED, 180.0),
        timed("gemm_fp16_4096", CUBLAS, 177.0),  # 0.98x: met (0.95)
        timed("gemm_fp16_4096", TRITON, 171.0),  # 0.95x: missed (1.0)
        timed("rmsnorm_rows", TUNED, 60.0),
        timed("rmsnorm_rows", "torch rms_norm", 66.0),
        timed("int4_gemv_m1", TUNED, 10.0),
        timed("int4_gemv_m1", INT4_PEERS[0], 80.0),
        timed("int4_gemv_m1", READ_FLOOR, 8.5),  # 0.85x: missed (0.9)
        timed("int4_gemm_m2048", TUNED, 100.0),
        timed("int4_gemm_m2048", CUBLAS_FP16, 89.0),  # 0.89x: met (1 / 1.15)
        Result("softmax_rows", TUNED, note="the tuning found no verified kernel"),
        timed("softmax_rows", "torch.softmax", 60.0),
    ]
    assert bars(results) == [
        f"gemm_fp16_4096: 0.98x {CUBLAS} (bar 0.95x): met",
        f"gemm_fp16_4096: 0.95x {TRITON} (bar 1.00x): MISSED",
        "int4_gemm_m2048: 0.89x fp16 cuBLAS on the same shape (bar 0.87x): met",
        "int4_gemv_m1: 0.85x the read floor (bar 0.90x): MISSED",
        f"int4_gemv_m1: 8.00x {INT4_PEERS[0]} (bar 1.00x): met",
        "rmsnorm_rows: 1.10x torch (bar 1.00x): met",
    ]


def test_every_workload_loads_and_the_mlc_form_gets_the_inline_forms_space() -> None:
    """The five-block MLC linear is measured beside the inline one: same kernels offered."""
    from bench.gpu_kernels import WORKLOADS
    from tunehub.compiler.program import load
    from tunehub.compiler.space import space_for
    from tunehub.schemas.target import Target

    programs = {w.signature.stem: load(w.signature.read_text()) for w in WORKLOADS}
    sm90 = Target(kind="cuda", arch="sm_90")
    mlc, inline = (space_for(programs[n], sm90) for n in ("int4_matmul_mlc", "int4_matmul"))
    assert mlc.knobs == inline.knobs and "wgmma" in mlc.knobs["s0.mode"]
