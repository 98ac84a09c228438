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
