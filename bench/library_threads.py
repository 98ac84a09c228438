"""The library times a CPU tuning reports, against the same code timed alone, on the threads
asked: whether `tune`'s numpy and torch figures are what a user timing that library gets.

    python bench/library_threads.py --threads 2 --rounds 8
    python bench/library_threads.py --threads 2 --before main     # main's timing beside this

For `examples/matmul_bias_relu.json` and `examples/softmax.json`, each round times, in an
order rotating from round to round: the baselines as a tuning reports them
(`worker.measure.library.library_baselines`, numpy's and torch's batches alternated), the
same with `worker/measure/library.py` as it is at the git ref `--before`, and numpy's and
torch's hand-written code each alone (`median_call_s`). Printed per program and library: the
median over rounds of reported / alone, with its range, and the load average. Read ratios,
not times: on a machine other processes keep busy, each time moves. First, what each
library's pool does after a batch of the matmul: the CPU time its other threads use in the
0.3 s after it, and how long `settle` waits for them.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from threadpoolctl import threadpool_limits

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tunehub.compiler.inputs import random_inputs  # noqa: E402
from tunehub.compiler.program import load  # noqa: E402
from tunehub.worker.measure import library  # noqa: E402
from tunehub.worker.measure.settle import others_cpu_s, settle  # noqa: E402

F32 = np.float32


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# The code a user would write with each library, on the program's inputs.
BY_HAND: dict[str, dict[str, Callable[[Any], object]]] = {
    "matmul_bias_relu": {
        "numpy": lambda a: np.maximum(a["A"] @ a["B"] + a["bias"], F32(0)),
        "torch": lambda t: torch.relu(torch.addmm(t["bias"], t["A"], t["B"])),
    },
    "softmax": {
        "numpy": lambda a: _softmax(a["X"]),
        "torch": lambda t: torch.softmax(t["X"], dim=-1),
    },
}


def module_at(ref: str) -> ModuleType:
    """`worker/measure/library.py` as it is at git ref `ref`, imported on its own."""
    source = subprocess.run(
        ["git", "show", f"{ref}:worker/measure/library.py"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp()) / f"library_at_{ref}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--before", help="a git ref whose library timing to run beside")
    args = parser.parse_args()
    modules = {"this tree": library} | (
        {args.before: module_at(args.before)} if args.before else {}
    )
    print(f"threads {args.threads}, load average {_load()} at the start", flush=True)
    _spin(args.threads)
    for name, by_hand in BY_HAND.items():
        _program(name, by_hand, modules, args.threads, args.rounds)


def _spin(threads: int) -> None:
    """Each library's pool after a batch: its threads' CPU time while the caller sleeps."""
    program = load((ROOT / "examples" / "matmul_bias_relu.json").read_text())
    arrays = random_inputs(program, {}, seed=0)
    tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
    inputs = {"numpy": arrays, "torch": tensors}
    with threadpool_limits(limits=threads), torch.inference_mode():
        torch.set_num_threads(threads)
        for lib, call in BY_HAND["matmul_bias_relu"].items():
            for _ in range(3):
                settle()
                for _ in range(200):
                    call(inputs[lib])
                before = others_cpu_s()
                time.sleep(0.3)
                spun = others_cpu_s() - before
                for _ in range(200):
                    call(inputs[lib])
                print(
                    f"after 200 {lib} calls: the other threads used {spun:.3f} s of CPU in the"
                    f" next 0.3 s; settle waited {settle():.3f} s",
                    flush=True,
                )


def _program(
    name: str,
    by_hand: dict[str, Callable[[Any], object]],
    modules: dict[str, ModuleType],
    threads: int,
    rounds: int,
) -> None:
    """The rounds of one program, and its ratios printed."""
    program = load((ROOT / "examples" / f"{name}.json").read_text())
    arrays = random_inputs(program, {}, seed=0)
    tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}

    def reported(module: ModuleType) -> dict[str, float]:
        return {b.library: b.latency_s for b in module.library_baselines(program, {}, threads)}

    def alone() -> dict[str, float]:
        return {
            "numpy": library.median_call_s(lambda: by_hand["numpy"](arrays), threads),
            "torch": library.median_call_s(lambda: by_hand["torch"](tensors), threads),
        }

    runs: dict[str, Callable[[], dict[str, float]]] = {
        f"reported ({label})": lambda m=module: reported(m)  # type: ignore[misc]
        for label, module in modules.items()
    }
    runs["alone"] = alone
    times: dict[str, list[dict[str, float]]] = {label: [] for label in runs}
    labels = list(runs)
    for r in range(rounds):
        for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
            times[label].append(runs[label]())
    print(f"\n{name} ({rounds} rounds, load average {_load()} at the end)")
    for label in labels[:-1]:
        for lib in ("numpy", "torch"):
            ratios = [t[lib] / a[lib] for t, a in zip(times[label], times["alone"], strict=True)]
            median_reported = statistics.median(t[lib] for t in times[label])
            median_alone = statistics.median(a[lib] for a in times["alone"])
            print(
                f"  {lib:5} {label:24} reported / alone: median {statistics.median(ratios):.2f}"
                f" (range {min(ratios):.2f}-{max(ratios):.2f}); medians"
                f" {median_reported * 1e3:.3f} ms / {median_alone * 1e3:.3f} ms",
                flush=True,
            )


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
