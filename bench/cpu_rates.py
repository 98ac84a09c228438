"""GFLOP/s of convolutions and of 16-bit-input matmuls beside the float32 matmul of the same
FLOPs, each tuned from scratch in one run on the CPU (one thread): the bars of issue 13's
convolution (>= 70% of the matmul's rate) and 16-bit input (>= 90%) items.

    python bench/cpu_rates.py                 # 64 trials each
    python bench/cpu_rates.py --trials 32 --only conv3x3

Each pair is a workload and the matmul doing its arithmetic as a plain GEMM: a 3x3
convolution of 64 channels and 64 filters on 28 x 28 (padding 1) in NCHW and NHWC beside the
784 x 64 x 576 matmul, a 1x1 convolution of 64 channels on 56 x 56 beside 3136 x 64 x 64, and
a 256^3 matmul with float16 inputs (cast to float32 in the product) beside the float32 one.
Results go to docs/benchmarks/cpu_rates-<date>-<isa>.md with the machine and commit.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine import write_cpu_report  # noqa: E402
from bench.tuning import retime, tune_cpu  # noqa: E402
from tests.compiler.test_forms import conv_forms, matmul_forms, tensor  # noqa: E402
from tunehub.compiler.flops import contraction_flops  # noqa: E402
from tunehub.compiler.program import load  # noqa: E402


def conv1x1(c: int, f: int, hw: int) -> dict[str, Any]:
    """A 1x1 convolution in NCHW: a matmul of the weight by the channels of every pixel."""
    return {
        "name": "conv1x1",
        "inputs": [tensor("data", [1, c, hw, hw]), tensor("weight", [f, c])],
        "computes": [
            {
                "name": "out",
                "axes": ["n", "f", "y", "x"],
                "shape": [1, f, hw, hw],
                "dtype": "float32",
                "reduce": {"op": "sum", "axes": {"c": c}},
                "expr": "data[n, c, y, x] * weight[f, c]",
            }
        ],
        "outputs": ["out"],
    }


def half_matmul(n: int) -> dict[str, Any]:
    """The n^3 matmul with float16 inputs, each cast to float32 in the product."""
    document = copy.deepcopy(matmul_forms(n, n, n)["nn"])
    for given in document["inputs"]:
        given["dtype"] = "float16"
    document["computes"][0]["expr"] = "float32(A[i, k]) * float32(B[k, j])"
    return {**document, "name": "half_matmul"}


# name -> (bar, {form: signature}, the float32 matmul of the same FLOPs)
PAIRS: dict[str, tuple[float, dict[str, dict[str, Any]], dict[str, Any]]] = {
    "conv3x3": (0.70, conv_forms(64, 64, 28), matmul_forms(28 * 28, 64, 64 * 9)["nn"]),
    "conv1x1": (0.70, {"conv1x1_nchw": conv1x1(64, 64, 56)}, matmul_forms(56 * 56, 64, 64)["nn"]),
    "half": (0.90, {"matmul_f16_inputs": half_matmul(256)}, matmul_forms(256, 256, 256)["nn"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--only", nargs="+", choices=sorted(PAIRS))
    args = parser.parse_args()
    lines = [
        "| workload | GFLOP/s | matmul of the same FLOPs | share of its rate | bar |",
        "|---|---|---|---|---|",
    ]
    configs = []
    for pair in args.only or PAIRS:
        bar, forms, matmul = PAIRS[pair]
        documents = [matmul, *forms.values()]
        kernels = [tune_cpu(document, args.trials) for document in documents]
        names = [f"{pair}'s matmul", *forms]
        configs += [f"- {name}: {k.knobs()}" for name, k in zip(names, kernels, strict=True)]
        flops = [contraction_flops(load(k.signature), {}) or 0 for k in kernels]
        base, *rates = (f / s / 1e9 for f, s in zip(flops, retime(kernels), strict=True))
        for name, rate in zip(forms, rates, strict=True):
            verdict = "met" if rate / base >= bar else "missed"
            lines.append(
                f"| {name} | {rate:.1f} | {base:.1f} | {rate / base:.0%} | {bar:.0%}: {verdict} |"
            )
            print(lines[-1], flush=True)
    write_cpu_report(
        "cpu_rates",
        "Convolution and 16-bit-input rates beside the matmul",
        f"python bench/cpu_rates.py --trials {args.trials}",
        "one thread each, every workload tuned from scratch in this run, then each pair's best "
        "kernels timed in turn, the fastest repeat of seven rounds",
        args.only,
        "\n".join(lines) + "\n\nThe tuned kernels:\n\n" + "\n".join(configs) + "\n",
    )


if __name__ == "__main__":
    main()
