"""Workloads outside the examples, the forms and the other benchmarks, each tuned on the CPU
and timed beside numpy: whether the spaces are general or fitted to what tunehub was built on.

    python bench/unseen.py                  # 32 trials, one thread, every workload
    python bench/unseen.py --trials 16 --only attention swiglu

The signatures are `bench/data/unseen/*.json`: attention (scores, softmax and the weighted sum
of 8 heads), a depthwise 3x3 convolution with stride 2 in NHWC, a softmax down the columns,
an int8 matmul with int32 sums and a float epilogue of two scales, a 2x2 max pool, a mean
over a middle axis, a SwiGLU block (two matmuls and a gated product) and a matmul reading
both operands transposed. Each is tuned from scratch through the real tuner; its best kernel
is then timed once more by the same rule as numpy's version of the signature (one array
expression per compute, `worker.measure.library`), one after the other, on one thread. The
report goes to docs/benchmarks/unseen-<date>-<isa>.md with the machine and the commit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine import cpu_tag, describe_machine, git_commit, only_suffix, report_path  # noqa: E402
from bench.tuning import median_latency, tune_cpu  # noqa: E402
from tunehub.compiler.program import load  # noqa: E402
from tunehub.worker.device import cpu_isa  # noqa: E402
from tunehub.worker.measure.library import library_latency  # noqa: E402

WORKLOADS = ROOT / "bench" / "data" / "unseen"


def main() -> None:
    names = sorted(path.stem for path in WORKLOADS.glob("*.json"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--only", nargs="+", choices=names)
    args = parser.parse_args()
    lines = [
        "| workload | tunehub | numpy | tunehub speed vs numpy | tuning |",
        "|---|---|---|---|---|",
    ]
    configs = []
    for name in args.only or names:
        document = json.loads((WORKLOADS / f"{name}.json").read_text())
        start = time.perf_counter()
        kernel = tune_cpu({k: v for k, v in document.items() if k != "version"}, args.trials)
        tuning = time.perf_counter() - start
        ours = median_latency(kernel)
        numpy = library_latency(load(document), {}, threads=1)
        lines.append(
            f"| {name} | {ours * 1e3:.4f} ms | {numpy * 1e3:.4f} ms | {numpy / ours:.2f}x | "
            f"{tuning:.0f} s |"
        )
        configs.append(f"- {name}: {kernel.knobs()}")
        print(lines[-1], flush=True)
    day = datetime.date.today().isoformat()
    option, suffix = only_suffix(args.only)
    header = (
        f"# Workloads outside the examples, tuned and timed beside numpy, {day}\n\n"
        f"Machine: {describe_machine()}; ISA {cpu_isa()}. Commit {git_commit()}. "
        f"`python bench/unseen.py --trials {args.trials}{option}` (one thread; each tuned "
        "kernel timed again right before numpy's version, by the same rule: the median of "
        "batches of at least 50 ms).\n\n"
    )
    out = report_path("unseen", cpu_tag(cpu_isa()) + suffix)
    out.write_text(
        header + "\n".join(lines) + "\n\nThe tuned kernels:\n\n" + "\n".join(configs) + "\n"
    )
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
