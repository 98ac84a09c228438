"""The numpy evaluator of the IR: the ground truth every compiled candidate is checked against.

Each compute is evaluated by broadcasting its body over the compute's index grid (its axes,
then its reduce axes), one block of the grid at a time so that no temporary exceeds
`max_elements` elements: a 1024^3 matmul runs in seconds without materializing 1G products.

Float sums of products (matmul, batched and transposed matmul, conv2d, dequantizing matmul)
take a fast path instead: the factors are split into two sides, each side is evaluated on its
own, smaller grid, and the sides are contracted with `np.matmul` (BLAS) in the compute's
float32/float64 accumulation dtype. The products and the accumulation dtype are the same as
the elementwise path's, only the summation order differs; on one core the 1024^3 matmul gets
about 100x faster (3 s to 20 ms) and the int4 example at M=64 50x (16 s to 0.3 s). Integer
sums stay on the elementwise path, whose wrapping semantics are exact, and so do
float16/bfloat16 computes, whose every term is rounded before it is summed.

Semantics follow C and `compiler.dtypes`, not numpy's defaults:
- every node's value is held in `dtypes.compute_dtype(node.dtype)`: float16/bfloat16
  arithmetic happens in float32, and values are rounded to 16 bits only by casts and stores;
- operands are converted to the node's compute dtype before the operation (comparisons: to
  the promoted type of their operands), and float32 math stays in float32;
- integer `//` and `%` truncate toward zero; integers wrap on overflow; float `//` is
  trunc(a / b) and float `%` is fmod (see `compiler.parse`);
- casts to integers truncate toward zero, to 16-bit floats round to nearest even, to bool
  test `!= 0`;
- a reduce casts its body to its term dtype (`Compute.term`: the compute's dtype, or float32
  for a 16-bit sum or product of a version 2 signature), accumulates in the compute's compute
  dtype from the op's identity, and rounds at the store.
Reads inside a `where` branch may be out of bounds by design (conv2d padding): their
indices are clipped into bounds and `where` discards those lanes. `compiler.program` proves
every other read in bounds; should one still fall outside, evaluation fails loudly.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from tunehub.compiler import dtypes
from tunehub.compiler.errors import SignatureError
from tunehub.compiler.ir import (
    Binary,
    Call,
    Cast,
    Compute,
    Const,
    Expr,
    Load,
    Program,
    Unary,
    Var,
    walk,
)

# 8M elements: at most 64 MB for an int64 or float64 temporary.
MAX_ELEMENTS = 1 << 23
# A sum of more factors than this is not worth trying every split of (2^(n-1) of them).
_MAX_FACTORS = 8

_REDUCERS: dict[str, np.ufunc] = {
    "sum": np.add,
    "prod": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def evaluate(
    program: Program,
    inputs: Mapping[str, np.ndarray],
    symbols: Mapping[str, int],
    *,
    max_elements: int = MAX_ELEMENTS,
    fast_contractions: bool = True,
    exact: bool = True,
) -> dict[str, np.ndarray]:
    """The program's outputs, each in its declared dtype, for these inputs and symbol values.

    `fast_contractions=False` evaluates float sums of products elementwise too: the plain
    definition, which the fast path is tested against. `exact=False` lets 16-bit sums of
    products take the fast path as well, without rounding each term: what a numpy user
    writes (`x.astype(float32) @ w`), timed as the library baseline, never a reference.
    """
    syms = _check_symbols(program, symbols)
    env: dict[str, np.ndarray] = {}
    for tensor in program.inputs:
        env[tensor.name] = _check_input(program, tensor.name, inputs, syms)
    with np.errstate(all="ignore"):
        for compute in program.computes:
            extents = _extents(program, compute, syms)
            plan = plan_contraction(compute, extents, exact) if fast_contractions else None
            if plan is None:
                value = _evaluate_compute(program, compute, env, syms, max_elements)
            else:
                value = _contract(plan, compute, env, syms, extents, max_elements)
            env[compute.name] = value
    return {name: env[name] for name in program.outputs}


def _check_symbols(program: Program, symbols: Mapping[str, int]) -> dict[str, int]:
    values: dict[str, int] = {}
    for sym in program.symbols:
        if sym.name not in symbols:
            raise ValueError(f"no value for symbol {sym.name!r}")
        value = int(symbols[sym.name])
        if not sym.min <= value <= sym.max:
            raise ValueError(f"symbol {sym.name}={value} outside [{sym.min}, {sym.max}]")
        values[sym.name] = value
    return values


def _check_input(
    program: Program, name: str, inputs: Mapping[str, np.ndarray], symbols: dict[str, int]
) -> np.ndarray:
    if name not in inputs:
        raise ValueError(f"no array for input {name!r}")
    array = np.asarray(inputs[name])
    shape = program.shape_of(name, symbols)
    dtype = dtypes.to_numpy(program.buffer(name).dtype)
    if array.shape != shape or array.dtype != dtype:
        raise ValueError(
            f"input {name!r} must be {dtype}{list(shape)}, got {array.dtype}{list(array.shape)}"
        )
    return array


def _extents(program: Program, compute: Compute, symbols: dict[str, int]) -> dict[str, int]:
    """The extent of each axis and reduce axis of `compute`."""
    shape = program.shape_of(compute.name, symbols)
    reduce_shape = (program.extent(r.extent, symbols) for r in compute.reduce_axes)
    names = compute.axes + tuple(r.name for r in compute.reduce_axes)
    return dict(zip(names, (*shape, *reduce_shape), strict=True))


def _evaluate_compute(
    program: Program,
    compute: Compute,
    env: dict[str, np.ndarray],
    symbols: dict[str, int],
    max_elements: int,
) -> np.ndarray:
    shape = program.shape_of(compute.name, symbols)
    reduce_shape = tuple(program.extent(r.extent, symbols) for r in compute.reduce_axes)
    names = compute.axes + tuple(r.name for r in compute.reduce_axes)
    extents = shape + reduce_shape
    acc_dtype = dtypes.compute_dtype(compute.dtype)
    if compute.reduce_op is None:
        acc = np.empty(shape, dtypes.to_numpy(acc_dtype))
    else:
        acc = np.full(shape, _identity(compute.reduce_op, acc_dtype), dtypes.to_numpy(acc_dtype))
    reduce_dims = tuple(range(len(shape), len(extents)))
    for block in _blocks(extents, max_elements):
        pairs = enumerate(zip(names, block, strict=True))
        spans = {name: (pos, *bounds) for pos, (name, bounds) in pairs}
        evaluator = _evaluator(env, spans, symbols, len(extents))
        # The store is a cast to the compute's dtype, each term of a reduce one to its term's.
        cast = compute.dtype if compute.reduce_op is None else compute.term
        value = _convert(evaluator.eval(compute.body, guarded=False), cast)
        block_shape = tuple(hi - lo for lo, hi in block)
        value = np.broadcast_to(value, block_shape)
        out = tuple(slice(lo, hi) for lo, hi in block[: len(shape)])
        if compute.reduce_op is None:
            acc[out] = value
        else:
            reducer = _REDUCERS[compute.reduce_op]
            acc[out] = reducer(acc[out], reducer.reduce(value, axis=reduce_dims, dtype=acc.dtype))
    return _convert(acc, compute.dtype).astype(dtypes.to_numpy(compute.dtype))


def _blocks(extents: tuple[int, ...], max_elements: int) -> list[list[tuple[int, int]]]:
    """Split the grid into blocks of at most `max_elements` points.

    Inner axes are kept whole while they fit; the first axis that does not fit is split, and
    the axes outside it go one index at a time. Reduce axes are innermost, so they are split
    only when one output point's reduction alone exceeds the budget.
    """
    sizes = [1] * len(extents)
    inner = 1
    for pos in reversed(range(len(extents))):
        extent = max(extents[pos], 1)
        if inner * extent <= max_elements:
            sizes[pos] = extent
            inner *= extent
        else:
            sizes[pos] = max(1, max_elements // inner)
            break
    ranges = [
        [(lo, min(lo + size, extent)) for lo in range(0, extent, size)]
        for extent, size in zip(extents, sizes, strict=True)
    ]
    return [list(block) for block in itertools.product(*ranges)]


def _evaluator(
    env: dict[str, np.ndarray],
    spans: dict[str, tuple[int, int, int]],
    symbols: dict[str, int],
    ndim: int,
) -> _Evaluator:
    """An evaluator over the block `spans` describes: each axis its values along its own
    dimension, each symbol its value."""
    grid = {name: _axis_values(lo, hi, pos, ndim) for name, (pos, lo, hi) in spans.items()}
    grid.update({name: np.array(value, np.int64) for name, value in symbols.items()})
    return _Evaluator(env, grid, spans, ndim)


def _axis_values(lo: int, hi: int, pos: int, ndim: int) -> np.ndarray:
    shape = [1] * ndim
    shape[pos] = hi - lo
    return np.arange(lo, hi, dtype=np.int64).reshape(shape)


def _identity(op: str, dtype: str) -> int | float | bool:
    if dtype == "bool":
        return op in ("prod", "min")
    if op in ("sum", "prod"):
        return 0 if op == "sum" else 1
    if dtypes.is_float(dtype):
        return -math.inf if op == "max" else math.inf
    info = np.iinfo(dtype)
    return int(info.min) if op == "max" else int(info.max)


def _convert(value: np.ndarray, dtype: str) -> np.ndarray:
    """`value` cast to `dtype` as C would, held in `dtype`'s compute dtype."""
    if dtype == "bool":
        return np.asarray(value != 0)
    if dtypes.is_half(dtype):
        return np.asarray(value).astype(dtypes.to_numpy(dtype)).astype(np.float32)
    target = dtypes.to_numpy(dtype)
    if value.dtype.kind == "f" and target.kind in "iu":
        # C converts a float to an integer by truncation; do it through int64 so that
        # negative values reach unsigned types wrapped rather than saturated.
        return np.asarray(np.trunc(value).astype(np.int64).astype(target, copy=False))
    return np.asarray(value).astype(target, copy=False)


class _Evaluator:
    """Evaluates one block of a compute's body; `grid` maps index names to broadcast arrays,
    `spans` each grid axis to its (position, lo, hi) in the block's `ndim` dimensions."""

    def __init__(
        self,
        env: dict[str, np.ndarray],
        grid: dict[str, np.ndarray],
        spans: dict[str, tuple[int, int, int]],
        ndim: int,
    ) -> None:
        self.env = env
        self.grid = grid
        self.spans = spans
        self.ndim = ndim

    def eval(self, expr: Expr, *, guarded: bool) -> np.ndarray:
        if isinstance(expr, Const):
            return np.array(expr.value, dtypes.to_numpy(dtypes.compute_dtype(expr.dtype)))
        if isinstance(expr, Var):
            return _convert(self.grid[expr.name], expr.dtype)
        if isinstance(expr, Load):
            return self._load(expr, guarded)
        if isinstance(expr, Cast):
            return _convert(self.eval(expr.x, guarded=guarded), expr.dtype)
        if isinstance(expr, Unary):
            return self._unary(expr, guarded)
        if isinstance(expr, Binary):
            return self._binary(expr, guarded)
        return self._call(expr, guarded)

    def _load(self, expr: Load, guarded: bool) -> np.ndarray:
        array = self.env[expr.tensor]
        view = self._view(expr, array)
        if view is not None:
            return _convert(view, expr.dtype)
        indices = []
        for dim, (index_expr, extent) in enumerate(zip(expr.indices, array.shape, strict=True)):
            index = self.eval(index_expr, guarded=guarded).astype(np.int64)
            outside = (index < 0) | (index >= extent)
            if outside.any():
                if not guarded:
                    bad = int(index[np.nonzero(outside)][0]) if index.ndim else int(index)
                    raise SignatureError(
                        f"read of {expr.tensor!r} outside its bounds: index {bad} in "
                        f"dimension {dim} of extent {extent}, not guarded by where"
                    )
                index = np.clip(index, 0, max(extent - 1, 0))
            indices.append(index)
        value = array[tuple(indices)]
        return _convert(np.asarray(value), expr.dtype)

    def _view(self, expr: Load, array: np.ndarray) -> np.ndarray | None:
        """The read as a view of `array` (sliced, transposed into the grid) where every index
        is a different grid axis within bounds: a matmul's operands, no gather."""
        if not all(isinstance(i, Var) and i.name in self.spans for i in expr.indices):
            return None
        spans = [self.spans[i.name] for i in expr.indices if isinstance(i, Var)]
        positions = [pos for pos, _, _ in spans]
        if len(set(positions)) < len(positions):
            return None
        if any(hi > extent for (_, _, hi), extent in zip(spans, array.shape, strict=True)):
            return None
        view = array[tuple(slice(lo, hi) for _, lo, hi in spans)]
        order = sorted(range(len(spans)), key=positions.__getitem__)
        shape = [1] * self.ndim
        for pos, lo, hi in spans:
            shape[pos] = hi - lo
        return view.transpose(order).reshape(shape)

    def _unary(self, expr: Unary, guarded: bool) -> np.ndarray:
        x = self.eval(expr.x, guarded=guarded)
        if expr.op == "not":
            return np.asarray(x == 0)
        x = _convert(x, dtypes.compute_dtype(expr.dtype))
        if expr.op == "neg":
            return np.asarray(np.negative(x))
        if expr.op == "invert":
            return np.asarray(np.invert(x))
        raise ValueError(f"unknown unary op {expr.op!r}")

    def _binary(self, expr: Binary, guarded: bool) -> np.ndarray:
        op = expr.op
        a = self.eval(expr.a, guarded=guarded)
        b = self.eval(expr.b, guarded=guarded)
        if op == "and":
            return np.asarray((a != 0) & (b != 0))
        if op == "or":
            return np.asarray((a != 0) | (b != 0))
        if op in ("<", "<=", ">", ">=", "==", "!="):
            common = dtypes.compute_dtype(dtypes.promote(expr.a.dtype, expr.b.dtype))
            return np.asarray(_COMPARISONS[op](_convert(a, common), _convert(b, common)))
        dtype = dtypes.compute_dtype(expr.dtype)
        a, b = _convert(a, dtype), _convert(b, dtype)
        ops = _FLOAT_OPS if dtypes.is_float(dtype) else _INT_OPS
        return np.asarray(ops[op](a, b))

    def _call(self, expr: Call, guarded: bool) -> np.ndarray:
        if expr.fn == "where":
            cond = self.eval(expr.args[0], guarded=guarded) != 0
            dtype = dtypes.compute_dtype(expr.dtype)
            a = _convert(self.eval(expr.args[1], guarded=True), dtype)
            b = _convert(self.eval(expr.args[2], guarded=True), dtype)
            return np.asarray(np.where(cond, a, b))
        dtype = dtypes.compute_dtype(expr.dtype)
        args = [_convert(self.eval(arg, guarded=guarded), dtype) for arg in expr.args]
        if expr.fn in ("abs", "min", "max"):
            return np.asarray(_SHARED_FNS[expr.fn](*args))
        if not dtypes.is_float(dtype):
            return _int_call(expr.fn, args)
        return np.asarray(_FLOAT_FNS[expr.fn](*args)).astype(args[0].dtype)


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C integer division. A zero divisor (undefined in C) yields 0 rather than a warning:
    it happens legitimately in lanes that a `where` discards."""
    safe = np.where(b == 0, np.ones_like(b), b)
    rem = np.fmod(a, safe)
    return np.where(b == 0, np.zeros_like(a), (a - rem) // safe)


def _trunc_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    safe = np.where(b == 0, np.ones_like(b), b)
    return np.where(b == 0, np.zeros_like(a), np.fmod(a, safe))


Op = Callable[[np.ndarray, np.ndarray], np.ndarray]

_COMPARISONS: dict[str, Op] = {
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
    "==": np.equal,
    "!=": np.not_equal,
}
_ARITHMETIC: dict[str, Op] = {"+": np.add, "-": np.subtract, "*": np.multiply}
_FLOAT_OPS: dict[str, Op] = {
    **_ARITHMETIC,
    "/": np.divide,
    "//": lambda a, b: np.trunc(a / b),
    "%": np.fmod,
}
_INT_OPS: dict[str, Op] = {
    **_ARITHMETIC,
    "//": _trunc_div,
    "%": _trunc_mod,
    "&": np.bitwise_and,
    "|": np.bitwise_or,
    "^": np.bitwise_xor,
    "<<": np.left_shift,
    ">>": np.right_shift,
}
_SHARED_FNS: dict[str, Callable[..., np.ndarray]] = {
    "abs": np.abs,
    "min": np.minimum,
    "max": np.maximum,
}

_erf64 = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf through libm in float64 (numpy has none): accurate to the last bit of float32
    once cast, and to about an ulp in float64."""
    return np.asarray(_erf64(x.astype(np.float64)), dtype=np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    one = x.dtype.type(1)
    return one / (one + np.exp(-x))


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return x.dtype.type(1) / np.sqrt(x)


_FLOAT_FNS: dict[str, Callable[..., np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": _rsqrt,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "erf": _erf,
    "floor": np.floor,
    "ceil": np.ceil,
    "pow": np.power,
}


def _int_call(fn: str, args: list[np.ndarray]) -> np.ndarray:
    """floor and ceil keep integer types and are the identity on them; the parser types every
    other math function on integers as float32, so nothing else reaches here."""
    if fn in ("floor", "ceil"):
        return args[0]
    raise SignatureError(f"{fn}() is not defined on integers")


# ----------------------------------------------------------------------------- contractions


@dataclass(frozen=True)
class Contraction:
    """A float sum of products regrouped as one batched matrix product,

        out[batch, rows, cols] = sum over k of lhs[batch, rows, k] * rhs[batch, k, cols]

    with k ranging over the `reduce` axes. `lhs` and `rhs` are products of factors, each
    converted to the accumulation dtype; `batch` are the spatial axes both sides read, `cols`
    those only `rhs` reads and `rows` the rest (a spatial axis neither side reads is a row,
    along which `lhs` is broadcast).
    """

    lhs: tuple[Expr, ...]
    rhs: tuple[Expr, ...]
    batch: tuple[str, ...]
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    reduce: tuple[str, ...]


def plan_contraction(
    compute: Compute, extents: dict[str, int], exact: bool = True
) -> Contraction | None:
    """The cheapest split of a sum of products whose terms are float32/float64 (with `exact`
    off, 16-bit ones too) into two sides, or None when `compute` is no such sum (then the
    elementwise path evaluates it)."""
    floats = ("float32", "float64") if exact else ("float32", "float64", *dtypes.HALF)
    if compute.reduce_op != "sum" or compute.term not in floats:
        return None
    body = compute.body
    while not exact and isinstance(body, Cast):
        body = body.x
    parts = _factors(body, dtypes.compute_dtype(compute.dtype))
    if not 2 <= len(parts) <= _MAX_FACTORS:
        return None
    reduce = tuple(r.name for r in compute.reduce_axes)
    used = [{e.name for e in walk(p) if isinstance(e, Var)} for p in parts]
    best: tuple[int, Contraction] | None = None
    for size in range(1, len(parts)):
        for left in itertools.combinations(range(1, len(parts)), size - 1):
            lhs = (0, *left)  # the side holding the first factor is `lhs`: each split once
            rhs = [n for n in range(len(parts)) if n not in lhs]
            lhs_axes = set().union(*(used[n] for n in lhs))
            rhs_axes = set().union(*(used[n] for n in rhs))
            plan = Contraction(
                lhs=tuple(parts[n] for n in lhs),
                rhs=tuple(parts[n] for n in rhs),
                batch=tuple(a for a in compute.axes if a in lhs_axes and a in rhs_axes),
                rows=tuple(a for a in compute.axes if a not in rhs_axes),
                cols=tuple(a for a in compute.axes if a in rhs_axes and a not in lhs_axes),
                reduce=reduce,
            )
            cost = _size(plan.batch + plan.rows + reduce, extents) + _size(
                plan.batch + reduce + plan.cols, extents
            )
            if best is None or cost < best[0]:
                best = (cost, plan)
    return None if best is None else best[1]


def _factors(expr: Expr, dtype: str) -> list[Expr]:
    """Factors whose product, each converted to `dtype`, is `expr` converted to `dtype`.

    Only products carried out in `dtype` and casts to `dtype` itself are looked through:
    either leaves every value as it was, while a cast to float16 or to an integer rounds,
    and a product in another type rounds or wraps differently.
    """
    if isinstance(expr, Binary) and expr.op == "*" and dtypes.compute_dtype(expr.dtype) == dtype:
        return _factors(expr.a, dtype) + _factors(expr.b, dtype)
    if isinstance(expr, Cast) and expr.dtype == dtype:
        return _factors(expr.x, dtype)
    return [expr]


def _size(axes: tuple[str, ...], extents: Mapping[str, int]) -> int:
    return math.prod(extents[a] for a in axes)


def _contract(
    plan: Contraction,
    compute: Compute,
    env: dict[str, np.ndarray],
    symbols: dict[str, int],
    extents: dict[str, int],
    max_elements: int,
) -> np.ndarray:
    """Evaluate a planned contraction block by block: each block evaluates both sides on
    their own axes and adds their matrix product into the output, in the output's dtype."""
    dtype = dtypes.compute_dtype(compute.dtype)
    acc = np.zeros(tuple(extents[a] for a in compute.axes), dtypes.to_numpy(dtype))
    lhs_axes = plan.batch + plan.rows + plan.reduce
    rhs_axes = plan.batch + plan.reduce + plan.cols
    out_axes = plan.batch + plan.rows + plan.cols
    block = _contraction_block(plan, extents, max_elements)
    ranges = {
        axis: [(lo, min(lo + block[axis], extent)) for lo in range(0, extent, block[axis])]
        for axis, extent in extents.items()
    }
    order = plan.reduce + plan.batch + plan.rows + plan.cols
    # The output in the compute's axis order, from the product's (batch, rows, cols).
    transpose = tuple(out_axes.index(a) for a in compute.axes)
    for los_his in itertools.product(*(ranges[a] for a in order)):
        bounds = dict(zip(order, los_his, strict=True))
        lhs = _side(plan.lhs, lhs_axes, bounds, env, symbols, dtype)
        rhs = _side(plan.rhs, rhs_axes, bounds, env, symbols, dtype)
        b, r, c, k = (
            _size(axes, {a: hi - lo for a, (lo, hi) in bounds.items()})
            for axes in (plan.batch, plan.rows, plan.cols, plan.reduce)
        )
        product = np.matmul(lhs.reshape(b, r, k), rhs.reshape(b, k, c))
        product = product.reshape(tuple(bounds[a][1] - bounds[a][0] for a in out_axes))
        out = tuple(slice(*bounds[a]) for a in compute.axes)
        acc[out] += product.transpose(transpose)
    return acc.astype(dtypes.to_numpy(compute.dtype), copy=False)


def _contraction_block(
    plan: Contraction, extents: dict[str, int], max_elements: int
) -> dict[str, int]:
    """The block size of each axis, so that neither side nor the product of a block exceeds
    `max_elements`. Reduce axes are split first, then batch axes (neither repeats work),
    then rows and cols (a split there evaluates the other side once per block)."""
    block = dict(extents)
    arrays = (
        plan.batch + plan.rows + plan.reduce,
        plan.batch + plan.reduce + plan.cols,
        plan.batch + plan.rows + plan.cols,
    )
    for axis in plan.reduce + plan.batch + plan.rows + plan.cols:
        over = [a for a in arrays if axis in a and _size(a, block) > max_elements]
        if over:
            rest = max(_size(a, block) // block[axis] for a in over)
            block[axis] = max(1, max_elements // max(rest, 1))
    return block


def _side(
    factors: tuple[Expr, ...],
    axes: tuple[str, ...],
    bounds: dict[str, tuple[int, int]],
    env: dict[str, np.ndarray],
    symbols: dict[str, int],
    dtype: str,
) -> np.ndarray:
    """The product of `factors` (each converted to `dtype`) over the block of `axes`."""
    spans = {name: (pos, *bounds[name]) for pos, name in enumerate(axes)}
    evaluator = _evaluator(env, spans, symbols, len(axes))
    value = _convert(evaluator.eval(factors[0], guarded=False), dtype)
    for factor in factors[1:]:
        value = value * _convert(evaluator.eval(factor, guarded=False), dtype)
    shape = tuple(bounds[a][1] - bounds[a][0] for a in axes)
    return np.broadcast_to(value, shape)
