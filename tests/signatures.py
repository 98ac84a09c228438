"""Task signatures shared by the tests, written out once so that the tests that load, key and
run them agree on one document."""

from __future__ import annotations

from typing import Any

from tunehub.compiler.kernel import KernelArg

# The example of ARCHITECTURE.md, "Task signature": a float16 matmul with a float32
# accumulator, then bias and relu.
MATMUL_BIAS_RELU = {
    "version": 1,
    "name": "matmul_bias_relu",
    "symbols": {"M": {"min": 1, "max": 8192}},
    "inputs": [
        {"name": "A", "shape": ["M", 1024], "dtype": "float16"},
        {"name": "B", "shape": [1024, 4096], "dtype": "float16"},
        {"name": "bias", "shape": [4096], "dtype": "float16"},
    ],
    "computes": [
        {
            "name": "acc",
            "axes": ["i", "j"],
            "shape": ["M", 4096],
            "dtype": "float32",
            "reduce": {"op": "sum", "axes": {"k": 1024}},
            "expr": "float32(A[i, k]) * float32(B[k, j])",
        },
        {
            "name": "out",
            "axes": ["i", "j"],
            "shape": ["M", 4096],
            "dtype": "float16",
            "expr": "float16(max(acc[i, j] + float32(bias[j]), 0.0))",
        },
    ],
    "outputs": ["out"],
}

# out[i] = 2 * a[i] + b[i] over a symbolic length N, so symbols travel too: the program of
# the hand-written runner candidates, CPU and CUDA.
AXPY = {
    "version": 1,
    "name": "axpy",
    "symbols": {"N": {"min": 1, "max": 1 << 20}},
    "inputs": [
        {"name": "a", "shape": ["N"], "dtype": "float32"},
        {"name": "b", "shape": ["N"], "dtype": "float32"},
    ],
    "computes": [
        {
            "name": "out",
            "axes": ["i"],
            "shape": ["N"],
            "dtype": "float32",
            "expr": "2.0 * a[i] + b[i]",
        }
    ],
    "outputs": ["out"],
}
# The arguments of every AXPY kernel, in the launch ABI of `compiler.kernel`.
AXPY_ARGS = (
    KernelArg("a", ("N",), "float32", "input"),
    KernelArg("b", ("N",), "float32", "input"),
    KernelArg("out", ("N",), "float32", "output"),
)


def row_matmul(name: str, *, k: int, n: int, max_m: int) -> dict[str, Any]:
    """C = A @ B in float32 over a symbolic row count M in [1, `max_m`], with A M x `k` and B
    `k` x `n`: small enough to build and measure in well under a second, and symbolic, so the
    tests that tune, submit and export it carry symbol values too."""
    return {
        "version": 1,
        "name": name,
        "symbols": {"M": {"min": 1, "max": max_m}},
        "inputs": [
            {"name": "A", "shape": ["M", k], "dtype": "float32"},
            {"name": "B", "shape": [k, n], "dtype": "float32"},
        ],
        "computes": [
            {
                "name": "C",
                "axes": ["i", "j"],
                "shape": ["M", n],
                "dtype": "float32",
                "reduce": {"op": "sum", "axes": {"k": k}},
                "expr": "A[i, k] * B[k, j]",
            }
        ],
        "outputs": ["C"],
    }


# Three shapes of one 64-vector that differ only in unit axes: the position ids and the two
# causal-mask index vectors of GPT-2 (`[1, 64]`, `[1, 1, 64, 1]`, `[1, 1, 1, 64]`).
UNIT_AXES_SHAPES = ([1, 64], [1, 1, 64, 1], [1, 1, 1, 64])


def unit_axes_trio(name: str = "index_vector") -> list[dict[str, Any]]:
    """One signature per shape of UNIT_AXES_SHAPES, `y = x + 1` for a 64-vector x, each a
    workload of its own: at their naive configs all three compile to the same bytes."""
    trio = []
    for shape in UNIT_AXES_SHAPES:
        axes = [f"a{n}" for n in range(len(shape))]
        along = axes[shape.index(64)]
        compute = {"name": "y", "axes": axes, "shape": shape, "dtype": "float32",
                   "expr": f"x[{along}] + 1.0"}  # fmt: skip
        trio.append({"version": 1, "name": name, "computes": [compute], "outputs": ["y"],
                     "inputs": [{"name": "x", "shape": [64], "dtype": "float32"}]})  # fmt: skip
    return trio
