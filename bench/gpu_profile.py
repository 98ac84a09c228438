"""Exported CUDA kernels timed one by one, then launched once each for a profiler.

    python bench/gpu_profile.py DIR [DIR ...] [--symbol M=1] [--knobs] [--check SIGNATURE]
    ncu --clock-control none -k regex:tunehub python bench/gpu_profile.py DIR ... --launch

Each DIR is a kernel as `tunehub compile` or `tunehub kernel` writes it. Timing is the GPU
benchmark's (`bench/gpu_kernels.py`: CUDA events, L2 flushed before each call, median), on
its random inputs; with `--launch` each kernel runs once and nothing is timed, so that a
profiler sees one launch per kernel. With `--check`, the signature the kernels were compiled
from, each kernel's first outputs are compared with the reference evaluator's on the same
inputs first, and a kernel that is wrong is reported as such and not timed: a kernel that
skips its work can look fast. Runs on a GPU machine with torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gpu_kernels import Timer, inputs_for  # noqa: E402
from tunehub.compiler.ir import Program  # noqa: E402
from tunehub.compiler.program import load  # noqa: E402
from tunehub.compiler.reference import evaluate  # noqa: E402
from tunehub.compiler.verify import compare, reduce_extent  # noqa: E402
from tunehub.runtime.arguments import numpy_dtype  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kernels", nargs="+", type=Path)
    parser.add_argument("--symbol", action="append", default=[], help="NAME=VALUE")
    parser.add_argument("--launch", action="store_true", help="launch once each, time nothing")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--knobs", action="store_true", help="print each kernel's mode knobs")
    parser.add_argument("--check", type=Path, help="the kernels' signature: verify each first")
    args = parser.parse_args()
    program = load(args.check.read_text()) if args.check else None
    expected: dict[str, np.ndarray] | None = None
    import torch

    from tunehub.runtime import load_kernel
    from tunehub.targets.cuda.kernel import CudaKernel

    given = dict((name, int(value)) for name, value in (s.split("=") for s in args.symbol))
    timer = Timer(torch, args.repeats)
    for directory in args.kernels:
        kernel = load_kernel(directory)
        assert isinstance(kernel, CudaKernel), f"{directory}: not a CUDA kernel"
        symbols = {name: value for name, value in given.items() if name in kernel.symbols}
        inputs = inputs_for(torch, kernel, symbols)
        launch = kernel.bind(*inputs, **symbols)
        if program is not None:
            if expected is None:
                pairs = zip(kernel.inputs, inputs, strict=True)
                arrays = {a.name: host(torch, x, a.dtype) for a, x in pairs}
                expected = evaluate(program, arrays, symbols)
            wrong = mismatch(program, symbols, expected, first_outputs(torch, kernel, launch))
            if wrong is not None:
                print(f"{directory.name:40s} WRONG: {wrong}", flush=True)
                launch.close()
                continue
        if args.launch:
            launch()
            torch.cuda.synchronize()
        else:
            line = f"{directory.name:40s} {timer.median(launch) * 1e6:9.1f} us"
            print(f"{line}  {mode_knobs(directory)}" if args.knobs else line, flush=True)
        launch.close()


def host(torch: Any, tensor: Any, dtype: str) -> np.ndarray:
    """A device tensor's values on the host as the reference evaluator holds `dtype`: its
    bytes through an integer view, which every dtype has (numpy has no bfloat16)."""
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    raw = tensor.detach().contiguous().view(ints[tensor.element_size()]).cpu().numpy()
    return raw.view(numpy_dtype(dtype))


def first_outputs(torch: Any, kernel: Any, launch: Any) -> dict[str, np.ndarray]:
    """The outputs of one call of `launch`, on the host."""
    launch()
    torch.cuda.synchronize()
    results = launch.result if isinstance(launch.result, tuple) else (launch.result,)
    pairs = zip(kernel.outputs, results, strict=True)
    return {a.name: host(torch, r, a.dtype) for a, r in pairs}


def mismatch(
    program: Program,
    symbols: Mapping[str, int],
    expected: Mapping[str, np.ndarray],
    outputs: Mapping[str, np.ndarray],
) -> str | None:
    """Why a kernel's `outputs` are not the reference's `expected` (tolerances as a tuning's
    verification: `compiler.verify`), or None."""
    for name in program.outputs:
        found = compare(
            expected[name],
            outputs[name],
            program.compute(name).dtype,
            reduce_extent=reduce_extent(program, name, dict(symbols)),
        )
        if not found.ok:
            return f"{name}: {found.message}"
    return None


def mode_knobs(directory: Path) -> str:
    """The knobs of the kernel's chosen mode, from its metadata (`s0.wgmma_bm=128 ...`)."""
    config = json.loads((directory / "metadata.json").read_text())["config"]
    mode = str(config.get("s0.mode", ""))
    return " ".join(f"{k}={v}" for k, v in config.items() if k.startswith(f"s0.{mode}_"))


if __name__ == "__main__":
    main()
