"""Exported CUDA kernels timed one by one, then launched once each for a profiler.

    python bench/gpu_profile.py DIR [DIR ...] [--symbol M=1] [--knobs]
    ncu --clock-control none -k regex:tunehub python bench/gpu_profile.py DIR ... --launch

Each DIR is a kernel as `tunehub compile` or `tunehub kernel` writes it. Timing is the GPU
benchmark's (`bench/gpu_kernels.py`: CUDA events, L2 flushed before each call, median), on
its random inputs; with `--launch` each kernel runs once and nothing is timed, so that a
profiler sees one launch per kernel. Runs on a GPU machine with torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gpu_kernels import Timer, inputs_for  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kernels", nargs="+", type=Path)
    parser.add_argument("--symbol", action="append", default=[], help="NAME=VALUE")
    parser.add_argument("--launch", action="store_true", help="launch once each, time nothing")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--knobs", action="store_true", help="print each kernel's mode knobs")
    args = parser.parse_args()
    import torch

    from tunehub.runtime import load_kernel
    from tunehub.targets.cuda.kernel import CudaKernel

    given = dict((name, int(value)) for name, value in (s.split("=") for s in args.symbol))
    timer = Timer(torch, args.repeats)
    for directory in args.kernels:
        kernel = load_kernel(directory)
        assert isinstance(kernel, CudaKernel), f"{directory}: not a CUDA kernel"
        symbols = {name: value for name, value in given.items() if name in kernel.symbols}
        launch = kernel.bind(*inputs_for(torch, kernel, symbols), **symbols)
        if args.launch:
            launch()
            torch.cuda.synchronize()
        else:
            line = f"{directory.name:40s} {timer.median(launch) * 1e6:9.1f} us"
            print(f"{line}  {mode_knobs(directory)}" if args.knobs else line, flush=True)
        launch.close()


def mode_knobs(directory: Path) -> str:
    """The knobs of the kernel's chosen mode, from its metadata (`s0.wgmma_bm=128 ...`)."""
    config = json.loads((directory / "metadata.json").read_text())["config"]
    mode = str(config.get("s0.mode", ""))
    return " ".join(f"{k}={v}" for k, v in config.items() if k.startswith(f"s0.{mode}_"))


if __name__ == "__main__":
    main()
