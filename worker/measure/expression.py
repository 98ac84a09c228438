"""A program as the array code a user would write for it: one line per compute, in numpy or in
torch, shown to the user (`tune --verbose`) and timed as the library baseline.

The code is what the reference evaluator's semantics leave out on purpose: plain broadcasting
of whole arrays, no blocking, no per-node conversions. A sum of products is the reference's
own split (`compiler.reference`) into two sides contracted by `@` (BLAS), or by
`einsum(optimize=True)` where no single matrix product expresses it; row reductions are
`x.sum(axis=-1)` and the like; everything else is elementwise array expressions, and what is
reduced or contracted in one compute and read again in another is named once (softmax's
`exp(x - max)`). A read along `k // 8` (an int4 weight's packed words) repeats the tensor
(`np.repeat`); other arithmetic indices gather with `np.ogrid` index arrays. The code is
timed, not used as a reference: C's integer semantics (truncating `//`) are not reproduced.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

from tunehub.compiler import dtypes
from tunehub.compiler.ir import (
    Binary,
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
from tunehub.compiler.reference import Contraction, plan_contraction


@dataclass(frozen=True)
class Dialect:
    """How one array library spells what the code needs."""

    name: str
    module: str  # the name the library is imported as
    functions: dict[str, str]  # IR function -> the library's
    reducers: dict[str, str]  # IR reduce op -> array method
    axis: str  # the keyword a reduction names its axes with
    permute: str  # the method reordering dimensions
    clip: str
    repeat: str  # each element `n` times along dimension `d` of `x`
    einsum_options: str
    matmul: str  # the (batched) matrix product of `a` and `b`

    def cast(self, text: str, dtype: str) -> str:
        if self.name == "torch":
            return f"{text}.to(torch.{dtype})"
        kind = "ml_dtypes.bfloat16" if dtype == "bfloat16" else f"np.{dtype}"
        return f"{text}.astype({'np.bool_' if dtype == 'bool' else kind})"

    def grid(self, extents: list[int]) -> str:
        """Index arrays, one per axis, each varying along its own dimension."""
        if self.name == "torch":
            n = len(extents)
            return ", ".join(
                f"torch.arange({e}).reshape({_shape([e if d == p else 1 for d in range(n)])})"
                for p, e in enumerate(extents)
            )
        return f"np.ogrid[{', '.join(f':{e}' for e in extents)}]"


_SHARED = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "floor": "floor"}
NUMPY = Dialect(
    "numpy",
    "np",
    {
        **{k: f"np.{v}" for k, v in _SHARED.items()},
        "ceil": "np.ceil",
        "abs": "np.abs",
        "min": "np.minimum",
        "max": "np.maximum",
        "where": "np.where",
        "erf": "erf",  # scipy.special's where installed (`library.namespace`)
    },
    {"sum": "sum", "prod": "prod", "max": "max", "min": "min"},
    "axis",
    "transpose",
    "np.clip",
    "np.repeat({x}, {n}, axis={d})",
    ", optimize=True",
    "{a} @ {b}",
)
TORCH = Dialect(
    "torch",
    "torch",
    {
        **{k: f"torch.{v}" for k, v in _SHARED.items()},
        "ceil": "torch.ceil",
        "abs": "torch.abs",
        "min": "torch.minimum",
        "max": "torch.maximum",
        "where": "torch.where",
        "erf": "torch.erf",
        "rsqrt": "torch.rsqrt",
        "sigmoid": "torch.sigmoid",
    },
    {"sum": "sum", "prod": "prod", "max": "amax", "min": "amin"},
    "dim",
    "permute",
    "torch.clamp",
    "{x}.repeat_interleave({n}, dim={d})",
    "",
    "torch.matmul({a}, {b})",
)


@dataclass(frozen=True)
class Code:
    """The lines computing a program's outputs from its inputs, each `name = expression`."""

    dialect: str
    lines: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def render(program: Program, symbols: dict[str, int], dialect: Dialect = NUMPY) -> Code:
    """The code computing `program` at `symbols`, in `dialect`."""
    names = [t.name for t in program.inputs] + [c.name for c in program.computes]
    shapes = {name: program.shape_of(name, symbols) for name in names}
    lines: list[str] = []
    shared: list[str] = []
    for compute in program.computes:
        shape = program.shape_of(compute.name, symbols)
        reduce = [program.extent(r.extent, symbols) for r in compute.reduce_axes]
        extents = dict(zip(compute.axes, shape, strict=True))
        extents.update(zip((r.name for r in compute.reduce_axes), reduce, strict=True))
        plan = plan_contraction(compute, extents, exact=False)
        writer = _Writer(dialect, symbols, extents, shapes)
        value = writer.compute(compute) if plan is None else writer.contraction(plan, compute)
        lines += [*writer.prelude, f"{compute.name} = {value}"]
        shared += writer.parts
    return Code(dialect.name, tuple(_shared(lines, shared)), tuple(program.outputs))


def operands(
    program: Program, compute: Compute, symbols: dict[str, int], dialect: Dialect
) -> tuple[str, str] | None:
    """The two matrices whose product `compute` is, in `dialect`, or None where it is no
    plain matrix product (batched, several axes, a cast result, index arrays)."""
    names = [t.name for t in program.inputs] + [c.name for c in program.computes]
    shapes = {name: program.shape_of(name, symbols) for name in names}
    extents = dict(zip(compute.axes, program.shape_of(compute.name, symbols), strict=True))
    extents.update((r.name, program.extent(r.extent, symbols)) for r in compute.reduce_axes)
    plan = plan_contraction(compute, extents, exact=False)
    acc = dtypes.compute_dtype(compute.dtype)
    if plan is None or plan.batch or acc != compute.dtype or compute.axes != plan.rows + plan.cols:
        return None
    if (len(plan.rows), len(plan.cols), len(plan.reduce)) != (1, 1, 1):
        return None
    writer = _Writer(dialect, symbols, extents, shapes)
    lhs = writer.side(plan.lhs, plan.rows + plan.reduce, acc)
    rhs = writer.side(plan.rhs, plan.reduce + plan.cols, acc)
    return None if writer.prelude else (lhs, rhs)


_ARITHMETIC = ("+", "-", "*", "/", "//", "%", "&", "|", "^", "<<", ">>")
_NUMBER = re.compile(r"[0-9.]+(e-?[0-9]+)?")
_SUBSCRIPT = re.compile(r"[\w.]+(\[[^\]]*\])?")  # a name or a view: nothing to share


def _shared(lines: list[str], parts: list[str]) -> list[str]:
    """`lines` with each of `parts` (what is reduced or contracted) that occurs more than
    once computed once, as a user names it: softmax's `exp(x - max)`, layernorm's `x - mean`.
    Every operand with an operator is parenthesized, so a part's text occurs only where its
    value does; the index arrays of a grid (`_i`) differ between computes, so no part naming
    them is shared."""
    for part in dict.fromkeys(parts):
        uses = sum(line.split(" = ", 1)[1].count(part) for line in lines)
        if uses < 2 or re.search(r"\b_[A-Za-z]", part) or _SUBSCRIPT.fullmatch(part):
            continue
        name = f"_t{sum(line.startswith('_t') for line in lines)}"
        first = next(n for n, line in enumerate(lines) if part in line.split(" = ", 1)[1])
        lines = [
            line.replace(f"({part})", name).replace(part, name) if n >= first else line
            for n, line in enumerate(lines)
        ]
        lines.insert(first, f"{name} = {part}")
    return lines


class _Writer:
    """Writes one compute's expression over its grid of axes (`extents`, in order)."""

    def __init__(
        self,
        dialect: Dialect,
        symbols: dict[str, int],
        extents: dict[str, int],
        shapes: dict[str, tuple[int, ...]],
    ) -> None:
        self.dialect = dialect
        self.symbols = symbols
        self.extents = extents
        self.shapes = shapes
        self.guarded = False  # inside a `where`, whose lanes may read out of bounds
        self.prelude: list[str] = []  # the index arrays the expression reads
        self.parts: list[str] = []  # what is reduced or contracted (`_shared`)
        self.grid: tuple[str, ...] = ()
        self.uses_grid = False
        self.suffix = ""  # of the index arrays' names: the two sides of a product differ

    def compute(self, compute: Compute) -> str:
        self.grid = (*compute.axes, *(r.name for r in compute.reduce_axes))
        body = self.expr(compute.body)
        if compute.reduce_op is not None:
            self.parts.append(body)
            dims = tuple(range(-len(compute.reduce_axes), 0))
            axis = str(dims[0]) if len(dims) == 1 else str(dims)
            method = self.dialect.reducers[compute.reduce_op]
            body = f"{_wrap(body)}.{method}({self.dialect.axis}={axis})"
        if compute.body.dtype != compute.dtype:
            body = self.dialect.cast(body, compute.dtype)
        return self._with_grid(body)

    def contraction(self, plan: Contraction, compute: Compute) -> str:
        acc = dtypes.compute_dtype(compute.dtype)
        lhs = self.side(plan.lhs, plan.batch + plan.rows + plan.reduce, acc)
        rhs = self.side(plan.rhs, plan.batch + plan.reduce + plan.cols, acc, "_r")
        out = plan.batch + plan.rows + plan.cols
        simple = len(plan.reduce) == 1 and len(plan.rows) <= 1 and len(plan.cols) <= 1
        if simple and (not plan.batch or (plan.rows and plan.cols)) and compute.axes == out:
            value = self.dialect.matmul.format(a=_wrap(lhs), b=_wrap(rhs))
        else:
            letters = dict(zip(self.extents, string.ascii_letters, strict=False))
            spec = "".join(letters[a] for a in plan.batch + plan.rows + plan.reduce)
            spec += "," + "".join(letters[a] for a in plan.batch + plan.reduce + plan.cols)
            spec += "->" + "".join(letters[a] for a in compute.axes)
            options = self.dialect.einsum_options
            value = f"{self.dialect.module}.einsum({spec!r}, {lhs}, {rhs}{options})"
        return value if compute.dtype == acc else self.dialect.cast(value, compute.dtype)

    def side(
        self, factors: tuple[Expr, ...], axes: tuple[str, ...], acc: str, suffix: str = ""
    ) -> str:
        """The product of one side's factors over its own grid, every axis present (its
        index arrays named with `suffix`, as both sides' grids are made before the product)."""
        self.grid, self.uses_grid, self.suffix = axes, False, suffix
        texts = []
        for factor in factors:
            text = self.expr(factor)
            texts.append(text if factor.dtype == acc else self.dialect.cast(_wrap(text), acc))
        value = " * ".join(_wrap(t) if len(texts) > 1 else t for t in texts)
        self.parts.append(value)
        dims = set().union(*(_vars(f) for f in factors)) & set(axes)
        if dims != set(axes):  # broadcast along the axes no factor reads
            value = f"{self.dialect.module}.broadcast_to({value}, {self._shape(axes)})"
        return self._with_grid(value)

    def _with_grid(self, value: str) -> str:
        """`value`, the index arrays of its grid made first where it reads them."""
        if self.uses_grid:
            names = ", ".join(f"_{a}{self.suffix}" for a in self.grid)
            names += "," if len(self.grid) == 1 else ""
            grid = self.dialect.grid([self.extents[a] for a in self.grid])
            self.prelude.append(f"{names} = {grid}")
        return value

    def _shape(self, axes: tuple[str, ...]) -> str:
        return _shape([self.extents[a] for a in axes])

    def expr(self, e: Expr) -> str:
        d = self.dialect
        if isinstance(e, Const):
            if e.dtype == "bool":
                return repr(bool(e.value))
            return repr(float(e.value) if dtypes.is_float(e.dtype) else int(e.value))
        if isinstance(e, Var):
            if e.name in self.symbols:
                return str(self.symbols[e.name])
            self.uses_grid = True
            return f"_{e.name}{self.suffix}"
        if isinstance(e, Load):
            return self.load(e)
        if isinstance(e, Cast):
            if isinstance(e.x, Const):  # folded, as a user writes it
                return self.expr(Const(e.x.value, e.dtype))
            return d.cast(_wrap(self.expr(e.x)), e.dtype)
        if isinstance(e, Unary):
            return f"-{_wrap(self.expr(e.x))}" if e.op == "neg" else f"~{_wrap(self.expr(e.x))}"
        if isinstance(e, Binary):
            op = {"and": "&", "or": "|"}.get(e.op, e.op)
            a, b = self.expr(e.a), self.expr(e.b)
            dtype = dtypes.compute_dtype(e.dtype)
            if op in _ARITHMETIC and dtype != "bool":  # as C converts: no wider type
                a, b = (
                    d.cast(_wrap(t), dtype) if x.dtype != dtype and _vars(x) else t
                    for t, x in ((a, e.a), (b, e.b))
                )
            return f"{_wrap(a)} {op} {_wrap(b)}"
        guarded, self.guarded = self.guarded, self.guarded or e.fn == "where"
        args = [self.expr(a) for a in e.args]
        self.guarded = guarded
        if e.fn == "pow":
            return f"{_wrap(args[0])} ** {_wrap(args[1])}"
        consts = [isinstance(a, Const) for a in e.args]
        if d.name == "torch" and e.fn in ("min", "max") and any(consts):
            bound = "max" if e.fn == "min" else "min"  # torch.maximum takes no numbers
            x, c = (args[1], args[0]) if consts[0] else (args[0], args[1])
            return f"torch.clamp({x}, {bound}={c})"
        if e.fn in d.functions:
            return f"{d.functions[e.fn]}({', '.join(args)})"
        if e.fn == "rsqrt":
            return f"1 / {d.functions['sqrt']}({args[0]})"
        assert e.fn == "sigmoid", e.fn
        return f"1 / (1 + {d.functions['exp']}(-{_wrap(args[0])}))"

    def load(self, e: Load) -> str:
        """A read: a (transposed, broadcast) view where each index is its own axis of the
        grid (or one divided by a constant: each element repeated), a gather with index
        arrays otherwise."""
        text = e.tensor
        names: list[str] = []
        for dim, index in enumerate(e.indices):
            repeat = _repeat(index, self.extents, self.shapes[e.tensor][dim])
            if repeat is None:
                return self.gather(e)
            name, times = repeat
            names.append(name)
            if times > 1:
                text = self.dialect.repeat.format(x=text, n=times, d=dim)
        if len(set(names)) < len(names) or set(names) - set(self.grid):
            return self.gather(e)
        positions = [self.grid.index(n) for n in names]
        order = sorted(range(len(positions)), key=positions.__getitem__)
        if order != list(range(len(order))):
            text += ".T" if len(order) == 2 else f".{self.dialect.permute}{tuple(order)}"
        present = sorted(positions)
        if not present:
            return text
        dims = [":" if p in present else "None" for p in range(present[0], len(self.grid))]
        return text if "None" not in dims else f"{text}[{', '.join(dims)}]"

    def gather(self, e: Load) -> str:
        """A read by index arrays (fancy indexing)."""
        indices = [self.expr(i) for i in e.indices]
        if self.guarded:  # the lanes `where` discards read clipped indices
            clip = self.dialect.clip
            extents = self.shapes[e.tensor]
            indices = [
                i if isinstance(x, Var) else f"{clip}({i}, 0, {n - 1})"
                for i, x, n in zip(indices, e.indices, extents, strict=True)
            ]
        return f"{e.tensor}[{', '.join(indices)}]"


def _repeat(index: Expr, extents: dict[str, int], size: int) -> tuple[str, int] | None:
    """(axis, c) where `index` is an axis, or an axis `// c` running over every element `c`
    times (an int4 weight's `k // 8`): then the read is the tensor repeated along it."""
    if isinstance(index, Var) and index.name in extents:
        return (index.name, 1) if extents[index.name] == size else None
    if not (isinstance(index, Binary) and index.op == "//" and isinstance(index.a, Var)):
        return None
    if not isinstance(index.b, Const) or index.a.name not in extents:
        return None
    times = int(index.b.value)
    return (index.a.name, times) if times > 0 and extents[index.a.name] == times * size else None


def _vars(e: Expr) -> set[str]:
    return {n.name for n in walk(e) if isinstance(n, Var)}


def _shape(extents: list[int]) -> str:
    return f"({extents[0]},)" if len(extents) == 1 else str(tuple(extents))


def _wrap(text: str) -> str:
    """`text` parenthesized unless it is one name, call or subscript."""
    if _NUMBER.fullmatch(text):
        return text
    depth = 0
    for char in text:
        depth += char in "([{"
        depth -= char in ")]}"
        if depth == 0 and char in " +-*/%<>=&|^~@":
            return f"({text})"
    return text
