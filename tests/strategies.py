"""Hypothesis strategies for random, valid task signatures (for property tests of compiled code).

A signature is a chain of 1-3 computes over a small pool of named axes (extents 1..9, one
possibly the symbol `S`): each compute reads the previous one (so producer -> reduction ->
epilogue fusion patterns arise), inputs over subsets of its axes (broadcasting and transposed
reads), and sometimes reduces 1-2 axes with sum/max/min (prod on floats). Every tensor is
indexed by axis names, so reads are in bounds; shifted reads are guarded by `where`.

Beyond validity, the programs are built so that a correct kernel always passes
`compiler.verify.compare` against the reference, whatever it reorders:
- no discontinuity is applied to a computed float (floor, ceil, %, truncation to int and
  comparisons are applied only to exact values: inputs, axes, integers), so ulp-level
  differences in float math cannot flip a result;
- float16 appears only in inputs and the last compute, whose body is clamped to +-500, so
  no rounding to 16 bits is amplified downstream and nothing overflows;
- values stay bounded: reads of float computes are clamped to +-100, reads of integer
  computes are taken `% 61`; integers only multiply by constants and are masked to 8 bits
  before a left shift, so nothing overflows (signed overflow is undefined in C); divisors
  and shift amounts are constants below 8, divisors nonzero;
- float literals are exact in float16, so how a float16-typed literal is held cannot matter;
- log, sqrt, rsqrt and pow (to the power 0.5) see `abs(x) + 1.0`, exp sees `min(x, 4.0)`,
  and a prod reduces `1.0 + 0.0625 * tanh(x)`.
Integer inputs are assumed to come from `compiler.inputs.random_inputs` (within [-8, 8)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

AXES = ("i", "j", "k", "l")
SYMBOL = "S"
MAX_DEPTH = 3
# Subexpressions longer than this are not duplicated (by where/max wrappers), which keeps
# every expression far below the parser's length limit.
_DUPLICATE_LIMIT = 160

Extent = int | str


@dataclass(frozen=True)
class _Tensor:
    name: str
    axes: tuple[str, ...]
    dtype: str
    is_input: bool


@dataclass(frozen=True)
class _Body:
    """What a compute body may use: its index names and extents, and readable tensors."""

    kind: str  # "float" or "int"
    indices: tuple[str, ...]
    extents: dict[str, Extent]
    readable: tuple[_Tensor, ...]


@st.composite
def signatures(draw: st.DrawFn, max_computes: int = 3, symbolic: bool = True) -> dict[str, Any]:
    """A task signature dict that `compiler.program.load` accepts.

    With `symbolic`, one axis may have the extent `S` (a symbol in [1, 9]).
    """
    pool = AXES[: draw(st.integers(2, len(AXES)))]
    extents: dict[str, Extent] = {a: draw(st.integers(1, 9)) for a in pool}
    symbols = {}
    if symbolic and draw(st.integers(0, 3)) == 0:
        extents[draw(st.sampled_from(pool))] = SYMBOL
        symbols[SYMBOL] = {"min": 1, "max": 9}

    tensors: list[_Tensor] = []
    inputs: list[dict[str, Any]] = []
    computes: list[dict[str, Any]] = []
    prev: _Tensor | None = None
    count = draw(st.integers(1, max_computes))
    for n in range(count):
        indices = _indices(draw, pool, prev)
        dtype = _compute_dtype(draw, prev, last=n == count - 1)
        kind = "int" if dtype == "int32" else "float"
        reduce_axes: list[str] = []
        if len(indices) >= 2 and draw(st.booleans()):
            order = draw(st.permutations(indices))
            reduce_axes = list(order[: draw(st.integers(1, min(2, len(indices) - 1)))])
        axes = [a for a in draw(st.permutations(indices)) if a not in reduce_axes]

        required = [prev] if prev is not None else []
        for _ in range(draw(st.integers(0 if prev else 1, 2))):
            tensor = _new_input(draw, f"X{len(inputs)}", indices)
            inputs.append(
                {
                    "name": tensor.name,
                    "shape": [extents[a] for a in tensor.axes],
                    "dtype": tensor.dtype,
                }
            )
            tensors.append(tensor)
            required.append(tensor)
        readable = tuple(
            t
            for t in tensors
            if set(t.axes) <= set(indices) and (kind == "float" or t.is_input or t.dtype == "int32")
        )
        body = _Body(kind, tuple(indices), extents, readable)
        expr = _expr(draw, body, MAX_DEPTH, required)
        decl: dict[str, Any] = {
            "name": f"c{n}",
            "axes": axes,
            "shape": [extents[a] for a in axes],
            "dtype": dtype,
        }
        if reduce_axes:
            ops = ["sum", "max", "min"] + (["prod"] if kind == "float" else [])
            op = draw(st.sampled_from(ops))
            decl["reduce"] = {"op": op, "axes": {a: extents[a] for a in reduce_axes}}
            if op == "prod":
                expr = f"1.0 + 0.0625 * tanh({expr})"
        if dtype == "float16":
            expr = f"min(max({expr}, -500.0), 500.0)"
        decl["expr"] = f"{dtype}({expr})"
        computes.append(decl)
        prev = _Tensor(f"c{n}", tuple(axes), dtype, is_input=False)
        tensors.append(prev)

    outputs = [c["name"] for c in computes[:-1] if draw(st.integers(0, 2)) == 0]
    return {
        "version": 1,
        "name": "random",
        "symbols": symbols,
        "inputs": inputs,
        "computes": computes,
        "outputs": [*outputs, computes[-1]["name"]],
    }


def symbol_values(signature: dict[str, Any]) -> st.SearchStrategy[dict[str, int]]:
    """Values for a signature's symbols, each within its declared range."""
    return st.fixed_dictionaries(
        {name: st.integers(decl["min"], decl["max"]) for name, decl in signature["symbols"].items()}
    )


def _indices(draw: st.DrawFn, pool: tuple[str, ...], prev: _Tensor | None) -> list[str]:
    """The index names of the next compute: those of the compute it reads, maybe one more."""
    if prev is None:
        order = draw(st.permutations(pool))
        return list(order[: draw(st.integers(1, min(3, len(pool))))])
    indices = list(prev.axes)
    spare = [a for a in pool if a not in indices]
    if spare and len(indices) < 3 and draw(st.booleans()):
        indices.insert(draw(st.integers(0, len(indices))), draw(st.sampled_from(spare)))
    return indices


def _compute_dtype(draw: st.DrawFn, prev: _Tensor | None, *, last: bool) -> str:
    """float32 mostly; int32 only while the chain is integral (a float cannot become an int
    without a discontinuity); float16 only for the last compute."""
    choices = ["float32"] * 3
    if prev is None or prev.dtype == "int32":
        choices.append("int32")
    if last:
        choices.append("float16")
    return draw(st.sampled_from(choices))


def _new_input(draw: st.DrawFn, name: str, indices: list[str]) -> _Tensor:
    order = draw(st.permutations(indices))
    axes = tuple(order[: draw(st.integers(1, min(3, len(indices))))])
    dtype = draw(st.sampled_from(["float32", "float32", "float32", "int32", "float16"]))
    return _Tensor(name, axes, dtype, is_input=True)


def _expr(draw: st.DrawFn, body: _Body, depth: int, required: list[_Tensor]) -> str:
    """A random expression of `body.kind` that reads every tensor in `required`."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        terms = [_read(draw, body, t) for t in required]
        if not terms or draw(st.booleans()):
            terms.append(_leaf(draw, body))
        result = terms[0]
        for term in terms[1:]:
            result = _binary(draw, body.kind, result, term)
        return result
    if draw(st.booleans()):
        return _unary(draw, body.kind, _expr(draw, body, depth - 1, required))
    split = draw(st.integers(0, len(required)))
    left = _expr(draw, body, depth - 1, required[:split])
    right = _expr(draw, body, depth - 1, required[split:])
    return _binary(draw, body.kind, left, right)


def _leaf(draw: st.DrawFn, body: _Body) -> str:
    choice = draw(st.integers(0, 3))
    if choice == 0 and body.readable:
        return _read(draw, body, draw(st.sampled_from(body.readable)))
    if choice == 1:
        axis = draw(st.sampled_from(body.indices))
        return f"float32({axis}) * 0.25" if body.kind == "float" else axis
    if body.kind == "float":
        return draw(st.sampled_from(["0.5", "-1.25", "2.0", "0.375", "3.0"]))
    return str(draw(st.integers(-7, 7)))


def _read(draw: st.DrawFn, body: _Body, tensor: _Tensor) -> str:
    """`tensor` read at its own axis names (sometimes shifted by one under a `where` guard),
    converted exactly to the body's kind."""
    indices = list(tensor.axes)
    text = f"{tensor.name}[{', '.join(indices)}]"
    shiftable = [p for p, a in enumerate(indices) if body.extents[a] != 1]
    if shiftable and draw(st.integers(0, 3)) == 0:
        pos = draw(st.sampled_from(shiftable))
        axis = indices[pos]
        if draw(st.booleans()):
            indices[pos], guard = f"{axis} - 1", f"{axis} >= 1"
        else:
            indices[pos], guard = f"{axis} + 1", f"{axis} + 1 < {body.extents[axis]}"
        fill = "0" if tensor.dtype == "int32" else "0.0"
        text = f"where({guard}, {tensor.name}[{', '.join(indices)}], {fill})"
    if tensor.dtype == "int32" and not tensor.is_input:
        text = f"({text} % 61)"
    if body.kind == "int":
        return text if tensor.dtype == "int32" else f"int32({text} * 8.0)"
    if tensor.dtype == "int32":
        return f"float32({text})"
    if not tensor.is_input:
        return f"min(max({text}, -100.0), 100.0)"
    return draw(st.sampled_from([text, text, f"floor({text} * 4.0)", f"({text} % 0.75)"]))


def _binary(draw: st.DrawFn, kind: str, a: str, b: str) -> str:
    if kind == "float":
        forms = ["({a} + {b})", "({a} - {b})", "({a} * {b})", "min({a}, {b})", "max({a}, {b})"]
        forms.append("({a} / (abs({b}) + 1.0))")
    else:
        forms = ["({a} + {b})", "({a} - {b})", "min({a}, {b})", "max({a}, {b})"]
        forms += ["({a} & {b})", "({a} | {b})", "({a} ^ {b})"]
    return draw(st.sampled_from(forms)).format(a=a, b=b)


def _unary(draw: st.DrawFn, kind: str, x: str) -> str:
    if kind == "float":
        forms = ["exp(min({x}, 4.0))", "tanh({x})", "sigmoid({x})", "erf({x})", "abs({x})"]
        forms += ["log(abs({x}) + 1.0)", "sqrt(abs({x}) + 1.0)", "rsqrt(abs({x}) + 1.0)"]
        forms += ["pow(abs({x}) + 1.0, 0.5)", "(-{x})", "({x} * 0.5 + 0.25)"]
        if len(x) < _DUPLICATE_LIMIT:
            forms.append("where({x} > 0.0, {x}, {x} * 0.125)")
    else:
        c = draw(st.sampled_from([1, 2, 3, 5, 7, -3]))
        s = draw(st.integers(0, 7))
        forms = [f"({{x}} // {c})", f"({{x}} % {c})", f"(({{x}} & 255) << {s})", f"({{x}} >> {s})"]
        forms += ["abs({x})", "(-{x})", "(~{x})", f"({{x}} * {c})"]
        if len(x) < _DUPLICATE_LIMIT:
            forms.append(f"where({{x}} < {c}, {{x}}, {c})")
    return draw(st.sampled_from(forms)).format(x=x)
