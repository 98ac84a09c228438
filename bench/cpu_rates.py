"""GFLOP/s of convolutions and of 16-bit-input matmuls beside the float32 matmul of the same
FLOPs, each tuned from scratch in one run on the CPU (one thread): the bars of issue 13's
convolution (>= 70% of the matmul's rate) and 16-bit input (>= 90%) items; and the 512^3
matmul in float32, bfloat16, float16 and int8, and the int4 linear, beside torch's own op
(issue 33's bars).

    python bench/cpu_rates.py                 # 64 trials each
    python bench/cpu_rates.py --trials 32 --only conv3x3
    python bench/cpu_rates.py --only engines  # the four dtypes and int4 beside torch
    python bench/cpu_rates.py --only engines --dtypes int8

Each pair is a workload and the matmul doing its arithmetic as a plain GEMM: a 3x3
convolution of 64 channels and 64 filters on 28 x 28 (padding 1) in NCHW and NHWC beside the
784 x 64 x 576 matmul, a 1x1 convolution of 64 channels on 56 x 56 beside 3136 x 64 x 64, and
a 256^3 matmul with float16 inputs (cast to float32 in the product) beside the float32 one.

`engines`: each dtype's 512^3 matmul (16-bit inputs summed in float32, int8 in int32; the
output float32 or int32) tuned from scratch on one thread and on all of them, each kernel
timed on the threads it was tuned for beside torch's op on the same threads
(`torch.matmul`, `torch._int_mm` for int8, whose 16-bit outputs are 16-bit), in rounds that
time each once in turn, the fastest repeat of each; each row names the kernel's path (a dot
instruction, AMX tiles, or the FMA template) and torch's CPU capability. `int4` and
`int4_bf16`: the int4 weight-only linear of seq 32, N = K = 1024 with bfloat16 activations in
tunehub's own signature layout, its weights dequantized in float32 or rounded to bfloat16 (the
engines' input), beside `torch.ops.aten._weight_int4pack_mm_for_cpu` on weights in its packed
layout (float32 dequantize, so it computes the first). Results go to
docs/benchmarks/cpu_rates-<date>-<isa>.md with the machine and commit.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine import write_cpu_report  # noqa: E402
from bench.tuning import Tuned, retime, tune_cpu  # noqa: E402
from tests.compiler.test_forms import conv_forms, matmul_forms, tensor  # noqa: E402
from tunehub.compiler.flops import contraction_flops  # noqa: E402
from tunehub.compiler.lower import lower  # noqa: E402
from tunehub.compiler.program import load  # noqa: E402
from tunehub.schemas.target import Target  # noqa: E402
from tunehub.worker.device import cpu_cores, cpu_isa  # noqa: E402


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


def typed_matmul(n: int, dtype: str, acc: str, name: str) -> dict[str, Any]:
    """The n^3 matmul with `dtype` inputs, each cast to `acc` in the product, summed in it."""
    document = copy.deepcopy(matmul_forms(n, n, n)["nn"])
    for given in document["inputs"]:
        given["dtype"] = dtype
    document["computes"][0]["expr"] = f"{acc}(A[i, k]) * {acc}(B[k, j])"
    document["computes"][0]["dtype"] = acc
    return {**document, "name": name}


def half_matmul(n: int) -> dict[str, Any]:
    """The n^3 matmul with float16 inputs, each cast to float32 in the product."""
    return typed_matmul(n, "float16", "float32", "half_matmul")


# name -> (bar, {form: signature}, the float32 matmul of the same FLOPs)
PAIRS: dict[str, tuple[float, dict[str, dict[str, Any]], dict[str, Any]]] = {
    "conv3x3": (0.70, conv_forms(64, 64, 28), matmul_forms(28 * 28, 64, 64 * 9)["nn"]),
    "conv1x1": (0.70, {"conv1x1_nchw": conv1x1(64, 64, 56)}, matmul_forms(56 * 56, 64, 64)["nn"]),
    "half": (0.90, {"matmul_f16_inputs": half_matmul(256)}, matmul_forms(256, 256, 256)["nn"]),
}


ENGINE_SIZE = 512
# dtype -> what the products are summed in
ENGINE_DTYPES = {"float32": "float32", "bfloat16": "float32", "float16": "float32", "int8": "int32"}
# The int4 linear of issue 33: seq 32, N = K = 1024, bfloat16 activations; its weights
# dequantized in float32 (what torch's kernel computes) or rounded to bfloat16 (an engine's
# input: what a bfloat16 model's dequantize does).
INT4_SHAPE = (32, 1024, 1024)
INT4_DEQUANTIZE = {
    "int4": "float32(int32((W[n, k // 8] >> (4 * (k % 8))) & 15) - 8) * float32(S[n, k // 32])",
    "int4_bf16": "float32(bfloat16(float32(int32((W[n, k // 8] >> (4 * (k % 8))) & 15) - 8)"
    " * float32(S[n, k // 32])))",
}
ENGINE_CASES = [*ENGINE_DTYPES, *INT4_DEQUANTIZE]
ROUNDS = 7


def int4_linear(name: str) -> dict[str, Any]:
    """The int4 linear `name` (`INT4_DEQUANTIZE`): 8 nibbles per uint32 along k, zero point
    8, a bfloat16 scale per 32 k values, the output bfloat16."""
    m, n, k = INT4_SHAPE
    return {
        "name": name,
        "inputs": [
            tensor("X", [m, k], "bfloat16"),
            tensor("W", [n, k // 8], "uint32"),
            tensor("S", [n, k // 32], "bfloat16"),
        ],
        "computes": [
            {
                "name": "acc",
                "axes": ["m", "n"],
                "shape": [m, n],
                "dtype": "float32",
                "reduce": {"op": "sum", "axes": {"k": k}},
                "expr": f"float32(X[m, k]) * {INT4_DEQUANTIZE[name]}",
            },
            {
                "name": "out",
                "axes": ["m", "n"],
                "shape": [m, n],
                "dtype": "bfloat16",
                "expr": "bfloat16(acc[m, n])",
            },
        ],
        "outputs": ["out"],
    }


def engine_case(case: str) -> tuple[dict[str, Any], int]:
    """The signature of an `ENGINE_CASES` entry and its multiply-adds x 2."""
    if case in INT4_DEQUANTIZE:
        m, n, k = INT4_SHAPE
        return int4_linear(case), 2 * m * n * k
    size = ENGINE_SIZE
    return typed_matmul(size, case, ENGINE_DTYPES[case], f"matmul_{case}"), 2 * size**3


def kernel_path(kernel: Tuned) -> str:
    """The instructions the kernel's register tile runs on (read from its C source)."""
    target = Target(kind="cpu", isa=cpu_isa())
    source = lower(load(kernel.signature), target, kernel.config).source
    paths = (
        ("_tile_dpbf16ps", "AMX tdpbf16ps"),
        ("_tile_dpbssd", "AMX tdpbssd"),
        ("_tile_dpbusd", "AMX tdpbusd"),
        ("dpbf16_ps", "vdpbf16ps"),
        ("dpbusd", "vpdpbusd"),
    )
    for intrinsic, name in paths:
        if intrinsic in source:
            return f"{name} ({target.isa})"
    return f"float32 fmas ({target.isa})"


def torch_timer(case: str) -> tuple[Any, str]:
    """A call of torch's own op on an `ENGINE_CASES` workload, and its name. The int4 cases
    both run `_weight_int4pack_mm_for_cpu` (its own packed layout, its dequantize in float32,
    zero points 0), which computes the `int4` signature: it has no bfloat16-rounded form."""
    import torch

    generator = torch.Generator().manual_seed(0)
    if case in INT4_DEQUANTIZE:
        m, n, k = INT4_SHAPE
        x = torch.randn(m, k, generator=generator).bfloat16()
        q = torch.randint(0, 16, (n, k), dtype=torch.int32, generator=generator)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        scales = torch.rand(k // 32, n, generator=generator).bfloat16()
        scales_zeros = torch.stack([scales, torch.zeros_like(scales)], dim=-1)
        op = torch.ops.aten._weight_int4pack_mm_for_cpu
        return (lambda: op(x, packed, 32, scales_zeros)), "_weight_int4pack_mm_for_cpu"
    n = ENGINE_SIZE
    if case == "int8":
        a, b = (
            torch.randint(-128, 128, (n, n), dtype=torch.int8, generator=generator) for _ in "ab"
        )
        return (lambda: torch._int_mm(a, b)), "torch._int_mm"
    a, b = (torch.randn(n, n, generator=generator).to(getattr(torch, case)) for _ in "ab")
    return (lambda: torch.matmul(a, b)), "torch.matmul"


def fastest_repeat(call: Any, repeats: int = 5, min_repeat_s: float = 0.01) -> float:
    """The fastest per-call time of `repeats` batches of at least `min_repeat_s`, as the
    tuner's timer counts a repeat."""
    call()
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            call()
        if time.perf_counter() - start >= min_repeat_s:
            break
        calls *= 2
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def engines(trials: int, chosen: list[str]) -> tuple[list[str], list[str]]:
    """Issue 33's table: each `chosen` case tuned on one thread and on all, each timed beside
    torch on its threads (a user tunes for the threads the kernel will run on)."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    lines = [
        f"| inputs | tunehub path | threads | tunehub | torch {torch.__version__} | speed |",
        "|---|---|---|---|---|---|",
    ]
    configs = []
    for case in chosen:
        signature, flops = engine_case(case)
        call, op = torch_timer(case)
        for threads in sorted({1, cpu_cores()}):
            kernel = tune_cpu(signature, trials, threads=threads)
            configs.append(f"- {case}, {threads} thread(s): {kernel.knobs()}")
            torch.set_num_threads(threads)
            ours, theirs = float("inf"), float("inf")
            for _ in range(ROUNDS):  # in turn: the machine's drift slows both alike
                ours = min(ours, retime([kernel], rounds=1, threads=threads)[0])
                theirs = min(theirs, fastest_repeat(call))
            rate = flops / 1e9
            lines.append(
                f"| {case} | {kernel_path(kernel)} | {threads} | {ours * 1e3:.3f} ms "
                f"({rate / ours:.0f} G/s) | {theirs * 1e3:.3f} ms ({rate / theirs:.0f} G/s, "
                f"{op}, {capability}) | {theirs / ours:.2f}x |"
            )
            print(lines[-1], flush=True)
    return lines, configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--only", nargs="+", choices=[*sorted(PAIRS), "engines"])
    parser.add_argument("--dtypes", nargs="+", choices=ENGINE_CASES, help="engines only")
    args = parser.parse_args()
    if args.only == ["engines"]:
        lines, configs = engines(args.trials, args.dtypes or ENGINE_CASES)
        write_cpu_report(
            "cpu_rates",
            "The 512^3 matmul in four dtypes and the int4 linear beside torch",
            f"python bench/cpu_rates.py --trials {args.trials}"
            + (f" --dtypes {' '.join(args.dtypes)}" if args.dtypes else ""),
            "each tuned from scratch in this run on one thread and on all, then timed on its "
            f"threads beside torch's op, in {ROUNDS} rounds that time each once in turn, the "
            "fastest repeat of each",
            args.only,
            "\n".join(lines) + "\n\nThe tuned kernels:\n\n" + "\n".join(configs) + "\n",
        )
        return
    lines = [
        "| workload | GFLOP/s | matmul of the same FLOPs | share of its rate | bar |",
        "|---|---|---|---|---|",
    ]
    configs = []
    for pair in [p for p in args.only or PAIRS if p in PAIRS]:
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
