"""Whether a model's eager forward pass is slower beside tunehub's kernels than alone: the
kernels' OpenMP threads against torch's, on the same threads (issue 31's 106 ms in
`bench/model_e2e.py`'s rotation against 16 ms in `optimize`'s race).

    python bench/model_threads.py --db tuned/llama.db              # a tuning of the model's tasks
    python bench/model_threads.py --db tuned/llama.db --busy 2     # with 2 busy processes beside

The model is one of `bench/model_e2e.py`'s (`--model`, default llama), optimized with
`min_speedup=0` so that every verified kernel runs. Rounds then time one eager forward pass
in each pattern, in turn: right after another eager pass, right after the optimized module,
and after the optimized module once the process's other threads are idle
(`worker.measure.settle`). Last, eager alone against eager inside model_e2e's rotation (eager,
`torch.compile`, the optimized module), alternated. `--busy N` starts N processes that spin
for the whole run: other work on the machine, as a shared machine has it. Medians with
quartiles, and the load average, are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.model_e2e import _time, make  # noqa: E402
from tunehub.torch import optimize  # noqa: E402
from tunehub.worker.measure.settle import settle  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="a tuning of the model's tasks")
    parser.add_argument("--model", default="llama")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--busy", type=int, default=0, help="busy processes beside the run")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = make(args.model)
    fast = optimize(
        model.module, model.inputs, args.db, directory=tempfile.mkdtemp(), min_speedup=0,
        verbose=False,
    )  # fmt: skip
    print(f"{len(fast.report.tuned)}/{len(fast.report.tasks)} task occurrences on kernels")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        with torch.no_grad():
            _patterns(lambda: model.module(*model.inputs), lambda: fast(*model.inputs), args)
            _rotation(model, fast, args)
    finally:
        for process in busy:
            process.kill()
            process.wait()


def _patterns(eager: Callable[[], Any], fast: Callable[[], Any], args: argparse.Namespace) -> None:
    """One eager pass timed after each pattern, the patterns in turn, `args.rounds` times."""
    patterns: dict[str, tuple[Callable[[], Any], bool]] = {
        "right after another eager pass": (eager, False),
        "right after the optimized module": (fast, False),
        "after the optimized module, then settle": (fast, True),
    }
    eager(), fast()
    times: dict[str, list[float]] = {label: [] for label in patterns}
    print(f"load average {_load()} at the start", flush=True)
    for _ in range(args.rounds):
        for label, (before, settled) in patterns.items():
            before()
            if settled:
                settle()
            start = time.perf_counter()
            eager()
            times[label].append(time.perf_counter() - start)
    print(f"eager forward pass, {args.rounds} rounds (load average {_load()} at the end):")
    for label, values in times.items():
        q1, median, q3 = statistics.quantiles(values, n=4)
        print(f"  {label}: {median * 1e3:.2f} ms (quartiles {q1 * 1e3:.2f}-{q3 * 1e3:.2f})")


def _rotation(model: Any, fast: Any, args: argparse.Namespace) -> None:
    """Eager alone against eager in model_e2e's rotation, alternated three times."""
    compiled = torch.compile(model.module)
    compiled(*model.inputs)
    rotation = {
        "eager": lambda: model.module(*model.inputs),
        "torch.compile": lambda: compiled(*model.inputs),
        "tunehub.torch": lambda: fast(*model.inputs),
    }
    for n in range(3):
        alone = _time({"eager": rotation["eager"]}, 4.0)["eager"]
        inside = _time(rotation, 6.0)
        runs = ", ".join(f"{label} {s * 1e3:.2f} ms" for label, s in inside.items())
        print(f"{n}: eager alone {alone * 1e3:.2f} ms; in the rotation {runs}; load {_load()}")


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
