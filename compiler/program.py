"""Load a task signature into a validated `Program`.

`schemas.signature` checks only the document's shape; everything semantic happens here, so
that every later stage (evaluator, lowering, renderers) may assume a well-formed program:
unique and unreserved names, declared symbols, positive extents, buffers small enough to
allocate, typed expressions that read only inputs and earlier computes at the right rank,
every compute used, and every read outside a `where` branch provably in bounds.

The bounds proof is interval arithmetic whose bounds are affine in the symbols: an axis over
`M` ranges over `[0, M - 1]`, so `A[i]` with `A` of extent `M` is in bounds for every value of
`M`, while `A[i + 1]` is not. It is sound (a read it accepts cannot go out of bounds, integer
wrap-around included) but not complete; reads it cannot prove belong under `where`, as
padding does. A read under a `where` branch is rejected only when it is always out of bounds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from math import ceil, floor, prod
from typing import Any

import numpy as np
from pydantic import ValidationError

from tunehub.compiler import dtypes
from tunehub.compiler.canonical import to_text
from tunehub.compiler.errors import SignatureError
from tunehub.compiler.ir import (
    Binary,
    Call,
    Cast,
    Compute,
    Const,
    Expr,
    Extent,
    Load,
    Program,
    ReduceAxis,
    Symbol,
    Tensor,
    Unary,
    Var,
    children,
    loads,
)
from tunehub.compiler.parse import RESERVED, Scope, parse
from tunehub.schemas.signature import NAME_PATTERN, ComputeDecl, TaskSignature

MAX_SYMBOL_VALUE = 2**31
MAX_ELEMENTS = 2**31  # per buffer at the symbol maxima, so element offsets fit 32 bits
MAX_TOTAL_BYTES = 16 * 2**30  # all inputs and computes together, at the symbol maxima


def load(signature: TaskSignature | dict[str, Any] | str) -> Program:
    """Validate a signature (model, dict, or JSON text) and build its `Program`."""
    sig = _model(signature)
    symbols = tuple(Symbol(n, s.min, s.max) for n, s in sig.symbols.items())
    for sym in symbols:
        if sym.max > MAX_SYMBOL_VALUE:
            raise SignatureError(
                f"symbol '{sym.name}': max {sym.max} is over the limit of {MAX_SYMBOL_VALUE}"
            )
    _check_names(sig)
    box = {s.name: (s.min, s.max) for s in symbols}
    inputs = tuple(
        Tensor(t.name, _shape(f"input '{t.name}'", t.shape, box), t.dtype) for t in sig.inputs
    )
    computes: list[Compute] = []
    for decl in sig.computes:
        computes.append(_compute(sig, decl, inputs, computes, box))
    _check_outputs(sig, computes)
    _check_sizes([*inputs, *computes], box)
    return Program(sig.name, symbols, inputs, tuple(computes), tuple(sig.outputs))


def _model(signature: TaskSignature | dict[str, Any] | str) -> TaskSignature:
    if isinstance(signature, TaskSignature):
        return signature
    try:
        if isinstance(signature, str):
            return TaskSignature.model_validate_json(signature)
        return TaskSignature.model_validate(signature)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        where = ".".join(str(p) for p in first["loc"]) or "signature"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        message = " ".join(str(first["msg"]).split())
        raise SignatureError(f"invalid signature: {where}: {message}{more}") from None


# -- names and shapes ----------------------------------------------------------------------


def _check_names(sig: TaskSignature) -> None:
    """Symbols and tensors share one namespace; each compute's axes and reduce axes must be
    distinct from each other and from every global name. The schema checks the syntax of
    tensor names only, so symbol and axis names are checked here."""
    seen: dict[str, str] = {}

    def declare(name: str, what: str, scope: dict[str, str]) -> None:
        if not re.fullmatch(NAME_PATTERN, name):
            raise SignatureError(f"{what}: the name {name!r} is not an identifier")
        if name in RESERVED:
            raise SignatureError(f"{what}: the name '{name}' is reserved")
        if name in scope:
            raise SignatureError(f"{what}: the name '{name}' is already used by {scope[name]}")
        scope[name] = what

    for name in sig.symbols:
        declare(name, f"symbol '{name}'", seen)
    for t in sig.inputs:
        declare(t.name, f"input '{t.name}'", seen)
    for c in sig.computes:
        declare(c.name, f"compute '{c.name}'", seen)
    for c in sig.computes:
        local = dict(seen)
        for axis in c.axes:
            declare(axis, f"compute '{c.name}' axis '{axis}'", local)
        for axis in c.reduce.axes if c.reduce else ():
            declare(axis, f"compute '{c.name}' reduce axis '{axis}'", local)


def _extent(what: str, extent: Extent, box: dict[str, tuple[int, int]]) -> Extent:
    if isinstance(extent, str):
        if extent not in box:
            raise SignatureError(f"{what}: '{extent}' is not a declared symbol")
    elif extent < 1:
        raise SignatureError(f"{what}: extent must be positive, got {extent}")
    return extent


def _shape(what: str, shape: list[Extent], box: dict[str, tuple[int, int]]) -> tuple[Extent, ...]:
    return tuple(_extent(f"{what} shape[{n}]", e, box) for n, e in enumerate(shape))


def _max_extent(extent: Extent, box: dict[str, tuple[int, int]]) -> int:
    return extent if isinstance(extent, int) else box[extent][1]


def _check_sizes(buffers: list[Tensor | Compute], box: dict[str, tuple[int, int]]) -> None:
    total = 0
    for buf in buffers:
        elements = prod(_max_extent(e, box) for e in buf.shape)
        if elements > MAX_ELEMENTS:
            raise SignatureError(
                f"'{buf.name}' has {elements} elements at the symbol maxima, over the limit "
                f"of {MAX_ELEMENTS}"
            )
        total += elements * dtypes.itemsize(buf.dtype)
    if total > MAX_TOTAL_BYTES:
        raise SignatureError(
            f"all buffers together take {total / 2**30:.1f} GiB at the symbol maxima, over "
            f"the limit of {MAX_TOTAL_BYTES // 2**30} GiB"
        )


# -- computes ------------------------------------------------------------------------------


def _compute(
    sig: TaskSignature,
    decl: ComputeDecl,
    inputs: tuple[Tensor, ...],
    earlier: list[Compute],
    box: dict[str, tuple[int, int]],
) -> Compute:
    what = f"compute '{decl.name}'"
    shape = _shape(what, decl.shape, box)
    reduce_axes = tuple(
        ReduceAxis(name, _extent(f"{what} reduce axis '{name}'", extent, box))
        for name, extent in (decl.reduce.axes.items() if decl.reduce else ())
    )
    reduce_op = decl.reduce.op if decl.reduce else None
    if decl.dtype == "bool" and reduce_op in ("sum", "prod"):
        raise SignatureError(f"{what}: reduce '{reduce_op}' on a bool compute")
    buffers: list[Tensor | Compute] = [*inputs, *earlier]
    scope = Scope(
        context=what,
        variables=frozenset((*decl.axes, *(r.name for r in reduce_axes), *box)),
        tensors={b.name: (b.dtype, len(b.shape)) for b in buffers},
        hints=_hints(sig, decl),
    )
    body = parse(decl.expr, scope)
    term = _term_dtype(sig, decl.dtype, reduce_op)
    compute = Compute(
        decl.name, tuple(decl.axes), shape, decl.dtype, body, reduce_op, reduce_axes, term
    )
    ranges: dict[str, Interval] = {s: (_Affine.symbol(s), _Affine.symbol(s)) for s in box}
    extents = [*zip(compute.axes, shape, strict=True), *((r.name, r.extent) for r in reduce_axes)]
    for axis, extent in extents:
        ranges[axis] = (_Affine.of(0), _Affine.extent(extent) - 1)
    shapes = {b.name: b.shape for b in buffers}
    _check_reads(what, body, shapes, ranges, box)
    return compute


def _term_dtype(sig: TaskSignature, dtype: str, reduce_op: str | None) -> str | None:
    """What a reduce casts each term to where it is not its own dtype: from version 2 on, a
    16-bit float sum or product combines its terms unrounded, in float32 (docs/signature.md)."""
    if sig.version >= 2 and reduce_op in ("sum", "prod") and dtypes.is_half(dtype):
        return dtypes.compute_dtype(dtype)
    return None


def _hints(sig: TaskSignature, decl: ComputeDecl) -> dict[str, str]:
    """Why names declared elsewhere cannot be used in `decl`'s expression."""
    hints: dict[str, str] = {}
    later = False
    for c in sig.computes:
        if c.name == decl.name:
            hints[c.name] = f"compute '{c.name}' reads itself"
            later = True
        elif later:
            hints[c.name] = f"compute '{c.name}' is read before it is defined"
        for axis in c.reduce.axes if c.reduce and c is not decl else ():
            hints.setdefault(axis, f"'{axis}' is a reduce axis of compute '{c.name}', not here")
    return hints


def _check_outputs(sig: TaskSignature, computes: list[Compute]) -> None:
    names = {c.name for c in computes}
    for n, out in enumerate(sig.outputs):
        if out in sig.outputs[:n]:
            raise SignatureError(f"output '{out}' is listed twice")
        if out not in names:
            kind = "an input" if any(t.name == out for t in sig.inputs) else "unknown"
            raise SignatureError(f"output '{out}' must name a compute, but it is {kind}")
    read = {ld.tensor for c in computes for ld in loads(c.body)}
    for c in computes:
        if c.name not in read and c.name not in sig.outputs:
            raise SignatureError(f"compute '{c.name}' is never used")


# -- bounds --------------------------------------------------------------------------------


def _check_reads(
    what: str,
    body: Expr,
    shapes: dict[str, tuple[Extent, ...]],
    ranges: dict[str, Interval],
    box: dict[str, tuple[int, int]],
) -> None:
    """Reads outside `where` branches must be provably in bounds; reads inside them must at
    least be possible."""
    stack: list[tuple[Expr, bool]] = [(body, False)]
    while stack:
        expr, guarded = stack.pop()
        kids = children(expr)
        if isinstance(expr, Call) and expr.fn == "where":
            stack += [(kids[0], guarded), (kids[1], True), (kids[2], True)]
            continue
        stack += [(k, guarded) for k in kids]
        if not isinstance(expr, Load):
            continue
        for n, (index, extent) in enumerate(zip(expr.indices, shapes[expr.tensor], strict=True)):
            lo, hi = _range(index, ranges, box)
            last = _Affine.extent(extent) - 1
            if hi.max(box) < 0 or (lo - last).min(box) > 0:
                problem = f"is always outside [0, {extent})"
            elif guarded:
                continue
            elif lo.min(box) < 0:
                problem = "can be negative; guard the read with where"
            elif (last - hi).min(box) < 0:
                problem = f"can reach {extent} or more; guard it with where"
            else:
                continue
            read = f"index {n} of '{expr.tensor}' ({to_text(index)})"
            raise SignatureError(f"{what}: {read} {problem}")


@dataclass(frozen=True)
class _Affine:
    """`const + sum(coef * symbol)`: a bound that may depend on the symbols' values."""

    const: Fraction
    coefs: tuple[tuple[str, Fraction], ...] = ()

    @staticmethod
    def of(value: int | Fraction) -> _Affine:
        return _Affine(Fraction(value))

    @staticmethod
    def symbol(name: str) -> _Affine:
        return _Affine(Fraction(0), ((name, Fraction(1)),))

    @staticmethod
    def extent(extent: Extent) -> _Affine:
        return _Affine.symbol(extent) if isinstance(extent, str) else _Affine.of(extent)

    def is_const(self) -> bool:
        return not self.coefs

    def __add__(self, other: _Affine | int) -> _Affine:
        if isinstance(other, int):
            return _Affine(self.const + other, self.coefs)
        coefs = dict(self.coefs)
        for name, c in other.coefs:
            coefs[name] = coefs.get(name, Fraction(0)) + c
        return _Affine(
            self.const + other.const, tuple(sorted((n, c) for n, c in coefs.items() if c))
        )

    def scale(self, factor: Fraction) -> _Affine:
        coefs = tuple((n, c * factor) for n, c in self.coefs) if factor else ()
        return _Affine(self.const * factor, coefs)

    def __neg__(self) -> _Affine:
        return self.scale(Fraction(-1))

    def __sub__(self, other: _Affine | int) -> _Affine:
        if isinstance(other, int):
            return self + (-other)
        return self + (-other)

    def min(self, box: dict[str, tuple[int, int]]) -> Fraction:
        return self.const + sum(
            (c * (box[n][0] if c > 0 else box[n][1]) for n, c in self.coefs), Fraction(0)
        )

    def max(self, box: dict[str, tuple[int, int]]) -> Fraction:
        return self.const + sum(
            (c * (box[n][1] if c > 0 else box[n][0]) for n, c in self.coefs), Fraction(0)
        )


Interval = tuple[_Affine, _Affine]


def _point(r: Interval) -> int | None:
    """The value of an interval that holds a single known integer, else None."""
    lo, hi = r
    if lo.is_const() and lo == hi and lo.const.denominator == 1:
        return int(lo.const)
    return None


def _concrete(r: Interval, box: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """Integer bounds valid for every symbol value (values are integers, so round inward)."""
    return ceil(r[0].min(box)), floor(r[1].max(box))


@cache
def _full(dtype: str) -> Interval:
    """Every value of `dtype`."""
    if dtype == "bool":
        return _Affine.of(0), _Affine.of(1)
    info = np.iinfo(dtypes.to_numpy(dtype))
    return _Affine.of(int(info.min)), _Affine.of(int(info.max))


def _range(expr: Expr, ranges: dict[str, Interval], box: dict[str, tuple[int, int]]) -> Interval:
    """Bounds of the integer or bool expression `expr` over all axis and symbol values.

    Any result that might leave its dtype's range becomes that whole range, which keeps the
    analysis sound under wrap-around."""
    if expr.dtype == "bool":
        return _full("bool")
    r: Interval | None = None
    if isinstance(expr, Const):
        r = _Affine.of(int(expr.value)), _Affine.of(int(expr.value))
    elif isinstance(expr, Var):
        r = ranges[expr.name]
    elif isinstance(expr, Cast):
        if not dtypes.is_float(expr.x.dtype):
            r = _range(expr.x, ranges, box)
    elif isinstance(expr, Unary):
        lo, hi = _range(expr.x, ranges, box)
        # ~x is -x - 1 in two's complement; unsigned results fall outside and widen below.
        r = (-hi, -lo) if expr.op == "neg" else (-hi - 1, -lo - 1)
    elif isinstance(expr, Binary):
        a, b = _range(expr.a, ranges, box), _range(expr.b, ranges, box)
        r = _binary(expr.op, a, b, box)
    elif isinstance(expr, Call):
        r = _call(expr.fn, [_range(x, ranges, box) for x in expr.args], box)
    full = _full(expr.dtype)
    if r is None or r[0].min(box) < full[0].const or r[1].max(box) > full[1].const:
        return full
    return r


def _binary(op: str, a: Interval, b: Interval, box: dict[str, tuple[int, int]]) -> Interval | None:
    if op == "+":
        return a[0] + b[0], a[1] + b[1]
    if op == "-":
        return a[0] - b[1], a[1] - b[0]
    if op == "*":
        return _mul(a, b, box)
    if op == "//":
        return _div(a, b, box)
    if op == "%":
        return _mod(a, b, box)
    shift = _point(b)
    if op == "<<" and shift is not None and 0 <= shift < 64:
        return _mul(a, (_Affine.of(2**shift), _Affine.of(2**shift)), box)
    if op == ">>" and shift is not None and 0 <= shift < 64:
        if a[0].min(box) >= 0:
            return _div(a, (_Affine.of(2**shift), _Affine.of(2**shift)), box)
        lo, hi = _concrete(a, box)
        return _Affine.of(lo >> shift), _Affine.of(hi >> shift)
    if op == "&":
        # x & y lies in [0, y] whenever y >= 0, whatever x is.
        his = [r[1] for r in (a, b) if r[0].min(box) >= 0]
        return (_Affine.of(0), min(his, key=lambda h: h.max(box))) if his else None
    if op in ("|", "^") and a[0].min(box) >= 0 and b[0].min(box) >= 0:
        bits = max(_concrete(a, box)[1], _concrete(b, box)[1]).bit_length()
        return _Affine.of(0), _Affine.of(2**bits - 1)
    return None


def _mul(a: Interval, b: Interval, box: dict[str, tuple[int, int]]) -> Interval:
    for x, y in ((a, b), (b, a)):
        c = _point(y)
        if c is not None:
            lo, hi = x[0].scale(Fraction(c)), x[1].scale(Fraction(c))
            return (lo, hi) if c >= 0 else (hi, lo)
    (al, ah), (bl, bh) = _concrete(a, box), _concrete(b, box)
    corners = [al * bl, al * bh, ah * bl, ah * bh]
    return _Affine.of(min(corners)), _Affine.of(max(corners))


def _trunc_div(p: int, q: int) -> int:
    return int(Fraction(p, q))


def _div(a: Interval, b: Interval, box: dict[str, tuple[int, int]]) -> Interval | None:
    """Truncating division; a symbolic upper bound of a non-negative dividend stays symbolic,
    since x // d <= x / d, which keeps `A[i // 2]` provable for a symbolic extent."""
    d = _point(b)
    if d is not None and d > 0 and a[0].min(box) >= 0:
        lo = _Affine.of(floor(a[0].min(box)) // d)
        hi = a[1].scale(Fraction(1, d)) if a[1].coefs else _Affine.of(floor(a[1].const) // d)
        return lo, hi
    bl, bh = _concrete(b, box)
    if bl <= 0 <= bh:
        return None
    al, ah = _concrete(a, box)
    # For a divisor of fixed sign, trunc(x / y) is monotone in each argument.
    corners = [_trunc_div(x, y) for x in (al, ah) for y in (bl, bh)]
    return _Affine.of(min(corners)), _Affine.of(max(corners))


def _mod(a: Interval, b: Interval, box: dict[str, tuple[int, int]]) -> Interval | None:
    """C remainder: the sign of the dividend, magnitude below the divisor's."""
    bl, bh = _concrete(b, box)
    if bl <= 0 <= bh:
        return None
    near, far = sorted((abs(bl), abs(bh)))
    if a[0].min(box) >= 0:
        if a[1].max(box) < near:
            return a
        hi = a[1] if a[1].max(box) <= far - 1 else _Affine.of(far - 1)
        return _Affine.of(0), hi
    al, ah = _concrete(a, box)
    return _Affine.of(max(al, 1 - far)), _Affine.of(max(0, min(ah, far - 1)))


def _lower(x: _Affine, y: _Affine, box: dict[str, tuple[int, int]]) -> _Affine:
    """A bound below both x and y."""
    if (x - y).min(box) >= 0:
        return y
    if (y - x).min(box) >= 0:
        return x
    return _Affine.of(min(x.min(box), y.min(box)))


def _upper(x: _Affine, y: _Affine, box: dict[str, tuple[int, int]]) -> _Affine:
    """A bound above both x and y."""
    return -_lower(-x, -y, box)


def _call(fn: str, args: list[Interval], box: dict[str, tuple[int, int]]) -> Interval | None:
    if fn in ("floor", "ceil"):
        return args[0]
    if fn == "abs":
        lo, hi = args[0]
        if lo.min(box) >= 0:
            return args[0]
        if hi.max(box) <= 0:
            return -hi, -lo
        al, ah = _concrete(args[0], box)
        return _Affine.of(0), _Affine.of(max(-al, ah))
    if fn == "where":
        (alo, ahi), (blo, bhi) = args[1], args[2]
        return _lower(alo, blo, box), _upper(ahi, bhi, box)
    (alo, ahi), (blo, bhi) = args
    if fn == "min":
        # min(a, b) is below each of ahi and bhi, so either bound is sound: take the tighter.
        return _lower(alo, blo, box), min(ahi, bhi, key=lambda h: h.max(box))
    if fn == "max":
        return max(alo, blo, key=lambda h: h.min(box)), _upper(ahi, bhi, box)
    return None
