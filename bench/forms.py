"""Equivalent forms of one computation, each tuned on the CPU in one run: how far apart their
tuned latencies are within each family (the goal: within 1.25x of each other).

    python bench/forms.py                   # 64 trials, one thread, every family
    python bench/forms.py --trials 32 --only matmul int4

The forms are those `tests/compiler/test_forms.py` checks, at benchmark sizes: a 256^3 matmul
in every operand layout and with axes of extent 1, a matmul + bias + relu + cast in one
compute and in four, an int4 linear (N = K = 1024, seq_len 32) inline and in MLC-LLM's five
blocks (signature version 2, as the TIR frontend reads them), the same linear with every
product rounded to float16 (the five blocks as version 1 reads them, and inline with the
cast written), and a 3x3 convolution of 32 channels on 28 x 28 in NCHW and NHWC. Each is tuned from
scratch through the real tuner; results go to docs/benchmarks/forms-<date>-<isa>.md with the
machine and commit.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine import write_cpu_report  # noqa: E402
from bench.tuning import retime, tune_cpu  # noqa: E402
from tests.compiler.test_forms import (  # noqa: E402
    conv_forms,
    epilogue_forms,
    int4_forms,
    int4_rounded_forms,
    matmul_forms,
)

FAMILIES = {
    "matmul": matmul_forms(256, 256, 256),
    "epilogue": epilogue_forms(256, 256, 256),
    "int4": int4_forms(1024, 1024),
    "int4_rounded": int4_rounded_forms(1024, 1024),
    "conv": conv_forms(32, 32, 28),
}
SYMBOLS = {"int4": {"seq": 32}, "int4_rounded": {"seq": 32}}
GOAL = 1.25


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--only", nargs="+", choices=sorted(FAMILIES))
    args = parser.parse_args()
    lines = ["| family | form | tuned | vs the family's fastest |", "|---|---|---|---|"]
    spreads, configs = [], []
    for family in args.only or FAMILIES:
        symbols = SYMBOLS.get(family, {})
        kernels = [tune_cpu(doc, args.trials, symbols) for doc in FAMILIES[family].values()]
        configs += [
            f"- {family} {name}: {k.knobs()}"
            for name, k in zip(FAMILIES[family], kernels, strict=True)
        ]
        times = dict(zip(FAMILIES[family], retime(kernels), strict=True))
        fastest = min(times.values())
        spreads.append((family, max(times.values()) / fastest))
        for name, seconds in times.items():
            lines.append(
                f"| {family} | {name} | {seconds * 1e3:.4f} ms | {seconds / fastest:.2f}x |"
            )
            print(lines[-1], flush=True)
    lines.append("")
    for family, spread in spreads:
        verdict = "within" if spread <= GOAL else "beyond"
        lines.append(f"- {family}: slowest form {spread:.2f}x the fastest ({verdict} {GOAL}x)")
    print("\n".join(lines[-len(spreads) :]))
    write_cpu_report(
        "forms",
        "Equivalent forms tuned side by side",
        f"python bench/forms.py --trials {args.trials}",
        "one thread each; each family's best kernels then timed in turn, the fastest repeat "
        "of seven rounds",
        args.only,
        "\n".join(lines) + "\n\nThe tuned kernels:\n\n" + "\n".join(configs) + "\n",
    )


if __name__ == "__main__":
    main()
