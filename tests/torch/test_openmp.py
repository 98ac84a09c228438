"""A CPU kernel in a process with torch runs on torch's own OpenMP runtime, whichever of the
two is loaded first: one libgomp, one pool of threads, so the kernels' threads never spin
beside torch's (what `optimize` and `bench/model_e2e.py` time them beside)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compiler.cbuild import HOST, compile_for
from tests.isa_log import note_isa
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="Linux's maps")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Loads the library at argv[1] and torch in the order argv[2] names, calls the kernel
# (softmax over 256 x 1024 floats: `#pragma omp parallel`), then runs a torch op on two
# threads; prints the OpenMP runtimes mapped into the process.
CHILD = """
import ctypes, json, sys
import numpy as np
def kernel():
    lib = ctypes.CDLL(sys.argv[1])
    x, y = np.ones((256, 1024), np.float32), np.empty((256, 1024), np.float32)
    pointers = [ctypes.c_void_p(a.ctypes.data) for a in (x, y)]
    assert getattr(lib, sys.argv[3])(*pointers) == 0
    assert np.allclose(y, 1 / 1024)
if sys.argv[2] == "kernel first":
    kernel()
import torch
torch.set_num_threads(2)
if sys.argv[2] == "torch first":
    kernel()
torch.ones(512, 512) @ torch.ones(512, 512)
print(json.dumps(sorted({l.split()[-1] for l in open("/proc/self/maps") if "omp" in l.lower()})))
"""


@pytest.mark.parametrize("order", ["torch first", "kernel first"])
def test_one_openmp_runtime_serves_the_kernels_and_torch(order: str) -> None:
    program = load((EXAMPLES / "softmax.json").read_text())
    kernel = lower(program, HOST, space_for(program, HOST).default())
    assert "#pragma omp parallel" in kernel.source
    library = compile_for(kernel, HOST.isa)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(library), order, kernel.entry],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    note_isa("ran", HOST.isa)
    runtimes = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(runtimes) == 1 and "gomp" in runtimes[0], runtimes
