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


LOWEST = "(-3.4028234663852886e+38)"  # a masked float32 logit, as `frontends.attention` writes it


def attention(
    *,
    batch: tuple[int, ...] = (1,),
    heads: int = 4,
    kv_heads: int = 4,
    queries: int | str = 6,
    keys: int | str = 10,
    depth: int = 8,
    width: int = 8,
    mask: str | None = None,
    causal: bool = False,
    packed: bool = False,
    dtype: str = "float32",
) -> dict[str, Any]:
    """Attention over `[*batch, heads, queries, depth]` queries as `frontends.attention`
    writes it: scores, scaled and masked logits (a boolean mask keeps where true, a float one
    is added), the softmax's max, sum and weights, and the weighted values, key/value heads
    read as `h // groups`. Lengths may be symbols (`queries="L"`). `packed`: q, k and v are
    views of one projection's output `[*batch, queries, 3 * heads * depth]`, as GPT-2 splits
    it (equal heads, lengths and widths)."""
    groups = heads // kv_heads
    b = [f"b{n}" for n in range(len(batch))]
    head = "h" if groups == 1 else f"(h) // {groups}"
    rows, scores = [*b, "h", "i"], [*b, "h", "i", "j"]
    row_shape, score_shape = [*batch, heads, queries], [*batch, heads, queries, keys]
    inputs = [
        {"name": "q", "shape": [*batch, heads, queries, depth], "dtype": dtype},
        {"name": "k", "shape": [*batch, kv_heads, keys, depth], "dtype": dtype},
        {"name": "v", "shape": [*batch, kv_heads, keys, width], "dtype": dtype},
    ]
    at = ", ".join(rows)
    kv = ", ".join([*b, head])
    q, k, v = f"q[{at}, d]", f"k[{kv}, j, d]", f"v[{kv}, j, e]"
    if packed:
        size = heads * depth
        inputs = [{"name": "qkv", "shape": [*batch, queries, 3 * size], "dtype": dtype}]
        lead = "".join(f"{n}, " for n in b)
        q = f"qkv[{lead}i, h * {depth} + d]"
        k, v = (
            f"qkv[{lead}j, {size} + h * {depth} + d]",
            f"qkv[{lead}j, {2 * size} + h * {depth} + e]",
        )
    logit = "s[" + ", ".join(scores) + "] * 0.35355339059327373"
    if mask is not None:
        inputs.append({"name": "mask", "shape": [queries, keys], "dtype": mask})
        logit = (
            f"where(mask[i, j], {logit}, {LOWEST})" if mask == "bool" else f"{logit} + mask[i, j]"
        )
    if causal:
        logit = f"where(j <= i, {logit}, {LOWEST})"
    symbols = {n: {"min": 1, "max": 64} for n in (queries, keys) if isinstance(n, str)}

    def compute(name: str, axes: list[str], shape: list[Any], expr: str, **over: int) -> dict:
        found = {"name": name, "axes": axes, "shape": shape, "dtype": dtype, "expr": expr}
        op = "max" if name == "m" else "sum"
        return {**found, "reduce": {"op": op, "axes": over}} if over else found

    computes = [
        compute("s", scores, score_shape, f"{q} * {k}",
                d=depth),
        compute("x", scores, score_shape, logit),
        compute("m", rows, row_shape, f"x[{at}, j]", j=keys),
        compute("z", rows, row_shape, f"exp(x[{at}, j] - m[{at}])", j=keys),
        compute("p", scores, score_shape, f"exp(x[{at}, j] - m[{at}]) / z[{at}]"),
        compute("o", [*rows, "e"], [*row_shape, width],
                f"p[{at}, j] * {v}", j=keys),
    ]  # fmt: skip
    return {"version": 1, "name": "attention", "symbols": symbols, "inputs": inputs,
            "computes": computes, "outputs": ["o"]}  # fmt: skip
