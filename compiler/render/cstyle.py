"""One renderer for every C-family dialect: loop IR (`compiler.loop`) in, source text out.

The renderer is driven by data and small hooks, in the manner of tinygrad's `cstyle.py`: the
type map, the function and helper prefixes, the pointer qualifier, the float32 math table, and
the hooks a dialect overrides — `loop_pragmas` (how loop kinds are annotated), `half_helpers`
(16-bit float conversions), `preamble` (includes and runtime support) and, for GPU dialects,
`function` (kernels), `bound_loop` (block/thread bindings), `shared_decl`, `barrier` and
`shuffle`. Each IR node type has one rule
(`_stmt_<type>` / `_expr_<type>`; a dialect adds those of its target's own statements, such as
CUDA's tensor cores), and the source is printed in one linear pass; the helper
functions it needs (math, conversions, vector load/store/broadcast) are collected on the way
(`compiler.render.helpers`, the renderer's base, with the type maps and the helper hooks)
and emitted before the function, so the output contains only what it uses.

Value semantics follow `compiler.dtypes` and `compiler.reference`: every expression is
rendered in its node's compute dtype (16-bit floats as `float`), operands are converted to
the node's compute dtype (comparisons: to their promoted type), integers wrap (int32
arithmetic goes through uint32; int64 is native, which `compiler.program`'s size limits make
safe for indices), integer `//` and `%` truncate and give 0 for a zero divisor, float `//` is
`trunc(a / b)` and float `%` is `fmod`, float-to-integer casts truncate through int64,
`min`/`max` propagate NaN like numpy. Math goes through helpers (`compiler.render.cmath`),
float32 exp/erf/tanh/sigmoid without libm so that they vectorize.

Names: signature names (arguments, workspaces, symbols) are printed with a trailing `_`, so a
tensor called `int` or `exp` is harmless; the loop IR's own names (letters and digits, see
`loop.Namer`) are printed as they are; the renderer's helpers and private names contain `_`
but never end with it.
"""

from __future__ import annotations

from collections.abc import Callable

from tunehub.compiler import dtypes
from tunehub.compiler.ir import COMPARISONS, Binary, Call, Cast, Const, Expr, Load, Unary, Var
from tunehub.compiler.loop import (
    BLOCK_KINDS,
    HORIZONTAL,
    SHUFFLES,
    THREAD_KINDS,
    Assign,
    Barrier,
    Buffer,
    Decl,
    For,
    Function,
    If,
    Prefetch,
    Seq,
    Stmt,
    Store,
    Workspace,
    as_expr,
    buffers_loaded,
    buffers_used,
    const_value,
    end,
    flat_index,
    lanes,
    product,
    scalar,
    vector,
)
from tunehub.compiler.render.helpers import CODES, CHelpers, compute
from tunehub.compiler.render.workspaces import ALLOCATOR, serial_uses

BOUND_KINDS = (*BLOCK_KINDS, *THREAD_KINDS)


class CStyleRenderer(CHelpers):
    """Renders a `loop.Function` as C-family source. Dialects set the attributes below and
    override the hooks; one instance renders one function at a time."""

    language = "c"
    function_prefix = ""
    restrict = "restrict"
    # Whether a buffer the function both writes and reads is still declared `restrict`. Not
    # on a GPU: its threads hand such buffers to each other across barriers (a fused
    # kernel's row statistics), and `restrict` lets nvcc hoist a thread's read of one above
    # the barrier when that thread itself never writes it (seen on an H100: NaN outputs).
    restrict_reread = True
    indent = "  "
    barrier: str | None = None  # the statement of `Barrier`, in dialects that have one
    warp_barrier: str | None = None  # and of `Barrier(warp=True)`

    # ---------------------------------------------------------------- hooks

    def preamble(self, fn: Function) -> list[str]:
        """Includes and runtime support, printed before the helpers."""
        return []

    def loop_pragmas(self, loop: For, collapse: int, reduction: list[tuple[str, str]]) -> list[str]:
        """Lines printed before a loop (a parallel one heads `collapse` nested loops)."""
        return []

    def thread_index(self) -> str:
        """The expression of the current thread's index, for per-thread workspaces."""
        raise NotImplementedError

    def thread_count(self) -> str:
        raise NotImplementedError

    def bound_loop(self, loop: For, depth: int) -> list[str]:
        """A block or thread binding (GPU dialects)."""
        raise ValueError(f"{self.language} has no {loop.kind} bindings")

    def shared_decl(self, stmt: Decl, depth: int) -> list[str]:
        """A shared-memory array (GPU dialects)."""
        raise ValueError(f"{self.language} has no shared memory")

    def shuffle(self, fn: str, value: str, offset: str, dtype: str) -> str:
        """A warp shuffle of `value` (of compute dtype `dtype`) (GPU dialects)."""
        raise ValueError(f"{self.language} has no warp shuffles")

    def lane_of(self, vector_text: str, lane: int, dtype: str) -> str:
        """One lane of a vector value of `dtype`, as its compute dtype."""
        return f"{vector_text}[{lane}]"

    # ---------------------------------------------------------------- entry point

    def render(self, fn: Function) -> str:
        self.fn = fn
        self._simd = 0
        self.helpers = {}
        self.locals: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.symbols = set(fn.symbols)
        body = self.function(fn)
        return "\n".join([*self.preamble(fn), *self.helpers.values(), *body, ""])

    def params(self, fn: Function, workspaces: bool = False) -> str:
        """The parameter list: inputs, outputs, (the workspaces, where the caller allocates
        them), symbols."""
        params = [
            f"const {self.storage_types[b.dtype]}* {self.restrict} {self.name(b.name)}"
            for b in fn.inputs
        ]
        written: list[Buffer | Workspace] = [*fn.outputs]
        written += fn.workspaces if workspaces else ()
        reread = set() if self.restrict_reread else buffers_loaded(fn.body)
        params += [
            f"{self.storage_types[b.dtype]}*{'' if b.name in reread else ' ' + self.restrict} "
            f"{self.name(b.name)}"
            for b in written
        ]
        params += [f"int64_t {self.name(s)}" for s in fn.symbols]
        return ", ".join(params)

    def function(self, fn: Function) -> list[str]:
        """The entry point. Its workspaces are carved from one block that the calling thread
        keeps between calls (`workspace`, see `compiler.render.workspaces`)."""
        lines = [f"{self.function_prefix}int {fn.name}({self.params(fn)}) {{"]
        pad = self.indent
        bases = [self._base(ws) for ws in fn.workspaces]
        sizes = [self._bytes(ws) for ws in fn.workspaces]
        if bases:
            self.need("workspace", ALLOCATOR)
            lines += [
                f"{pad}int64_t {base}_size = ({size} + 63) & ~(int64_t)63;"
                for base, size in zip(bases, sizes, strict=True)
            ]
            total = " + ".join(f"{base}_size" for base in bases)
            lines += [f"{pad}char* block = workspace({total});", f"{pad}if (!block) return 1;"]
            offset = "0"
            for ws, base in zip(fn.workspaces, bases, strict=True):
                kind = self.storage_types[ws.dtype]
                lines.append(f"{pad}{kind}* {base} = ({kind}*)(block + {offset});")
                offset = f"{offset} + {base}_size" if offset != "0" else f"{base}_size"
        lines += [
            f"{pad}__builtin_memset({base}, 0, {size});"
            for ws, base, size in zip(fn.workspaces, bases, sizes, strict=True)
            if ws.zeroed
        ]
        serial = serial_uses(fn.body)
        private = [ws for ws in fn.workspaces if ws.per_thread and ws.name in serial]
        lines += self._thread_pointers(private, "0", 1)
        lines += self.stmt(fn.body, 1)
        lines += [f"{pad}return 0;", "}"]
        return lines

    def _base(self, ws: Workspace) -> str:
        return f"{self.name(ws.name)}base" if ws.per_thread else self.name(ws.name)

    def _bytes(self, ws: Workspace) -> str:
        elements = self.expr(self._elements(ws))
        count = f"{elements} * {self.thread_count()}" if ws.per_thread else elements
        return f"(int64_t)({count}) * (int64_t)sizeof({self.storage_types[ws.dtype]})"

    def _elements(self, ws: Workspace) -> Expr:
        return product(as_expr(e) for e in ws.shape)

    def _thread_pointers(self, workspaces: list[Workspace], thread: str, depth: int) -> list[str]:
        pad = self.indent * depth
        return [
            f"{pad}{self.storage_types[ws.dtype]}* {self.restrict} {self.name(ws.name)} = "
            f"{self._base(ws)} + (int64_t)({thread}) * ({self.expr(self._elements(ws))});"
            for ws in workspaces
        ]

    def name(self, name: str) -> str:
        """How a name of the signature (argument, workspace, symbol) is printed."""
        return f"{name}_"

    # ---------------------------------------------------------------- statements

    def stmt(self, stmt: Stmt, depth: int) -> list[str]:
        kind = type(stmt).__name__
        rule: Callable[[Stmt, int], list[str]] | None = getattr(self, f"_stmt_{kind}", None)
        if rule is None:
            raise ValueError(f"{self.language} has no {kind} statements")
        return rule(stmt, depth)

    def _stmt_Seq(self, stmt: Seq, depth: int) -> list[str]:
        return [line for child in stmt.body for line in self.stmt(child, depth)]

    def _stmt_For(self, loop: For, depth: int) -> list[str]:
        if loop.kind in BOUND_KINDS:
            return self.bound_loop(loop, depth)
        chain = [loop]
        while loop.kind == "parallel" and isinstance(chain[-1].body, For):
            if chain[-1].body.kind != "parallel":
                break
            chain.append(chain[-1].body)
        reduction = [r for inner in chain for r in inner.reduction]
        pad = self.indent * depth
        lines = [pad + p for p in self.loop_pragmas(loop, len(chain), reduction)]
        for level, inner in enumerate(chain):
            inner_pad = self.indent * (depth + level)
            start = self.expr(inner.start)
            bound = self.expr(end(inner))
            v = inner.var
            lines.append(f"{inner_pad}for (int64_t {v} = {start}; {v} < {bound}; {v}++) {{")
        body_depth = depth + len(chain)
        if loop.kind == "parallel":
            used = buffers_used(chain[-1].body)
            private = [ws for ws in self.fn.workspaces if ws.per_thread and ws.name in used]
            lines += self._thread_pointers(private, self.thread_index(), body_depth)
        simd = loop.kind == "vectorize" or (loop.kind == "parallel" and loop.factor > 0)
        self._simd += simd
        lines += self.stmt(chain[-1].body, body_depth)
        self._simd -= simd
        lines += [f"{self.indent * (depth + level)}}}" for level in reversed(range(len(chain)))]
        return lines

    def _stmt_If(self, stmt: If, depth: int) -> list[str]:
        pad = self.indent * depth
        lines = [f"{pad}if ({self.value(stmt.cond, 'bool')}) {{", *self.stmt(stmt.then, depth + 1)]
        if stmt.orelse is not None:
            lines += [f"{pad}}} else {{", *self.stmt(stmt.orelse, depth + 1)]
        return [*lines, f"{pad}}}"]

    def _stmt_Decl(self, stmt: Decl, depth: int) -> list[str]:
        if dtypes.is_half(stmt.dtype) and not stmt.shared:
            raise ValueError(f"local {stmt.name!r}: locals hold compute dtypes (float32)")
        self.locals[stmt.name] = (stmt.dtype, stmt.shape)
        if stmt.shared:
            return self.shared_decl(stmt, depth)
        pad = self.indent * depth
        t = self.ctype(stmt.dtype)
        if stmt.shape:
            size = 1
            for extent in stmt.shape:
                size *= extent
            return [f"{pad}{t} {stmt.name}[{size}];"]
        if stmt.init is None:
            return [f"{pad}{t} {stmt.name};"]
        return [f"{pad}{t} {stmt.name} = {self.value(stmt.init, stmt.dtype)};"]

    def _stmt_Assign(self, stmt: Assign, depth: int) -> list[str]:
        dtype = self.locals[stmt.name][0]
        return [f"{self.indent * depth}{stmt.name} = {self.value(stmt.value, dtype)};"]

    def _stmt_Barrier(self, stmt: Barrier, depth: int) -> list[str]:
        line = self.warp_barrier if stmt.warp else self.barrier
        if line is None:
            raise ValueError(f"{self.language} has no barriers")
        return [f"{self.indent * depth}{line}"]

    def _stmt_Prefetch(self, stmt: Prefetch, depth: int) -> list[str]:
        element = self._element(stmt.buffer, stmt.indices)
        return [f"{self.indent * depth}__builtin_prefetch(&{element});"]

    def _stmt_Store(self, stmt: Store, depth: int) -> list[str]:
        pad = self.indent * depth
        if stmt.buffer in self.locals:
            dtype, shape = self.locals[stmt.buffer]
            index = self._index(stmt.indices, tuple(as_expr(e) for e in shape))
            if lanes(stmt.value.dtype) > lanes(dtype):  # a vector into scalars (aligned)
                helper = self._lane_helper("vstore", stmt.value.dtype)
                return [f"{pad}{helper}(&{stmt.buffer}[{index}], {self.expr(stmt.value)});"]
            if dtypes.is_half(dtype):  # a shared array of 16-bit storage
                return [f"{pad}{stmt.buffer}[{index}] = {self._half_value(stmt.value, dtype)};"]
            return [f"{pad}{stmt.buffer}[{index}] = {self.value(stmt.value, dtype)};"]
        buf = self._buffer(stmt.buffer)
        target = self._element(stmt.buffer, stmt.indices)
        dtype = vector(buf.dtype, lanes(stmt.value.dtype))
        if dtypes.is_half(buf.dtype) and (copied := self._half_copy(stmt.value, buf.dtype)):
            return [f"{pad}{target} = {copied};"]
        if dtypes.is_half(buf.dtype):  # the store rounds: a cast to its dtype is redundant
            value = self.value(rounded(stmt.value, dtype), compute(dtype))
        else:
            value = self.value(stmt.value, dtype)
        if lanes(dtype) > 1:
            return [f"{pad}{self._lane_helper('vstore', dtype)}(&{target}, {value});"]
        if dtypes.is_half(buf.dtype):
            return [f"{pad}{target} = {self.half('store', buf.dtype)}({value});"]
        return [f"{pad}{target} = {value};"]

    def _half_value(self, value: Expr, dtype: str) -> str:
        """`value` as 16-bit `dtype` storage: copied, or rounded (`_half_copy`)."""
        copied = self._half_copy(value, dtype)
        return copied or f"{self.half('store', dtype)}({self.value(value, 'float32')})"

    def _half_copy(self, value: Expr, dtype: str) -> str | None:
        """A widened element of a `dtype` buffer, stored as `dtype`: its bits, copied as
        they are (a panel packed from bfloat16 operands is a copy, not a round trip through
        float32 that the compiler may not vectorize); None for anything else."""
        ld = widened(value)
        if (
            isinstance(ld, Load)
            and ld.tensor not in self.locals
            and lanes(ld.dtype) == 1
            and self._buffer(ld.tensor).dtype == dtype
        ):
            return self._element(ld.tensor, ld.indices)
        return None

    def _buffer(self, name: str) -> Workspace:
        buf = self.fn.buffer(name)
        if buf is None:
            raise ValueError(f"unknown buffer {name!r}")
        return Workspace(buf.name, buf.dtype, buf.shape)

    def _element(self, name: str, indices: tuple[Expr, ...]) -> str:
        """`buffer[flat index]` of an argument or workspace of the function."""
        buf = self._buffer(name)
        index = self._index(indices, tuple(as_expr(e) for e in buf.shape))
        return f"{self.name(buf.name)}[{index}]"

    def _index(self, indices: tuple[Expr, ...], shape: tuple[Expr, ...]) -> str:
        return self.expr(flat_index(indices, shape))

    # ---------------------------------------------------------------- expressions

    def expr(self, expr: Expr) -> str:
        """`expr` in its own compute dtype."""
        rule: Callable[[Expr], str] = getattr(self, f"_expr_{type(expr).__name__}")
        return rule(expr)

    def value(self, expr: Expr, dtype: str) -> str:
        """`expr` converted to the compute dtype of `dtype`."""
        return self.convert(self.expr(expr), expr.dtype, dtype)

    def convert(self, text: str, src: str, dst: str) -> str:
        src, dst = compute(src), compute(dst)
        if src == dst:
            return text
        if lanes(dst) > 1:
            if lanes(src) == 1:
                element = self.convert(text, src, scalar(dst))
                return f"{self._lane_helper('bcast', dst)}({element})"
            return f"__builtin_convertvector({text}, {self.ctype(dst)})"
        t = self.types[dst]
        if dtypes.is_float(src) and dtypes.is_int(dst) and dst != "int64":
            return f"(({t})(int64_t)({text}))"
        return f"(({t})({text}))"

    def _expr_Const(self, expr: Const) -> str:
        dtype = compute(expr.dtype)
        value = expr.value
        if dtype == "bool":
            return "1" if value else "0"
        if dtypes.is_float(dtype):
            value = float(value)
            if value != value:
                text = "NAN"
            elif value in (float("inf"), float("-inf")):
                text = "INFINITY" if value > 0 else "(-INFINITY)"
            else:
                text = repr(value) + ("f" if dtype == "float32" else "")
            return f"(({self.types[dtype]}){text})" if text == "NAN" else _paren(text)
        value = int(value)
        if dtype == "uint32":
            return f"{value}u"
        if -(2**31) < value < 2**31:
            return _paren(str(value))
        return "INT64_MIN" if value == -(2**63) else f"INT64_C({value})"

    def _expr_Var(self, expr: Var) -> str:
        return self.name(expr.name) if expr.name in self.symbols else expr.name

    def _expr_Load(self, expr: Load) -> str:
        if expr.tensor in self.locals:
            dtype, shape = self.locals[expr.tensor]
            index = self._index(expr.indices, tuple(as_expr(e) for e in shape))
            if dtypes.is_half(dtype):
                return f"{self.half('load', dtype)}({expr.tensor}[{index}])"
            return f"{expr.tensor}[{index}]"
        buf = self._buffer(expr.tensor)
        element = self._element(expr.tensor, expr.indices)
        n = lanes(expr.dtype)
        if n > 1:
            return f"{self._lane_helper('vload', vector(buf.dtype, n))}(&{element})"
        if dtypes.is_half(buf.dtype):
            return f"{self.half('load', buf.dtype)}({element})"
        return element

    def _expr_Cast(self, expr: Cast) -> str:
        dst = scalar(expr.dtype)
        if dtypes.is_half(dst) and not _exact(expr.x, dst):
            value = self.value(expr.x, expr.dtype)
            rounding = self.half("round", dst)
            n = lanes(expr.dtype)
            fast = self.half_vector("round", dst, n) if n > 1 else None
            if fast is not None:
                vt = self.ctype(expr.dtype)
                rounding = self._helper(f"round{CODES[dst]}_{vt}", vt, f"{vt} x", fast)
            elif n > 1:
                rounding = self._lanewise(f"round{CODES[dst]}", rounding, expr.dtype, False)
            return f"{rounding}({value})"
        return self.value(expr.x, expr.dtype)

    def _expr_Unary(self, expr: Unary) -> str:
        if expr.op == "not" or (expr.op == "invert" and expr.dtype == "bool"):
            return f"(!{self.value(expr.x, 'bool')})"
        x = self.value(expr.x, expr.dtype)
        symbol = "-" if expr.op == "neg" else "~"
        dtype = compute(expr.dtype)
        if dtypes.is_float(scalar(dtype)) or lanes(dtype) > 1:
            return f"({symbol}{x})"
        return self._wrap(dtype, f"{symbol}{x}", f"0 - {x}" if symbol == "-" else f"~{x}")

    def _wrap(self, dtype: str, native: str, unsigned_form: str) -> str:
        """Integer arithmetic that wraps like numpy: narrow types are promoted by C and cut
        back; int32 goes through uint32 (signed overflow is undefined in C)."""
        t = self.types[dtype]
        if dtype == "int32":
            return f"((int32_t)({unsigned_form}))"
        if dtypes.BITS[dtype] < 32:
            return f"(({t})({native}))"
        return f"({native})"

    def _expr_Binary(self, expr: Binary) -> str:
        op = expr.op
        if op in ("and", "or"):
            a, b = self.value(expr.a, "bool"), self.value(expr.b, "bool")
            return f"({a} {'&&' if op == 'and' else '||'} {b})"
        if op in COMPARISONS:
            common = dtypes.promote(scalar(expr.a.dtype), scalar(expr.b.dtype))
            return f"({self.value(expr.a, common)} {op} {self.value(expr.b, common)})"
        a, b = self.value(expr.a, expr.dtype), self.value(expr.b, expr.dtype)
        dtype = compute(expr.dtype)
        if dtypes.is_float(scalar(dtype)):
            if op == "//":
                return f"{self.math('trunc', dtype)}({a} / {b})"
            if op == "%":
                return f"{self.math('fmod', dtype)}({a}, {b})"
            return f"({a} {op} {b})"
        if lanes(dtype) > 1:
            return f"({a} {'/' if op == '//' else op} {b})"
        if op in ("//", "%"):
            divisor = const_value(expr.b) if isinstance(expr.b, Const) else None
            if divisor is None or divisor in (0, -1):
                return f"{self.math('div' if op == '//' else 'mod', dtype)}({a}, {b})"
            return self._wrap(dtype, f"{a} {'/' if op == '//' else op} {b}", f"{a} {op[-1]} {b}")
        unsigned = f"(uint32_t){a} {op} (uint32_t){b}" if op in "+-*<<" else f"{a} {op} {b}"
        return self._wrap(dtype, f"{a} {op} {b}", unsigned)

    def _expr_Call(self, expr: Call) -> str:
        fn, args = expr.fn, expr.args
        if fn == "where":
            cond = self.value(args[0], "bool")
            a, b = self.value(args[1], expr.dtype), self.value(args[2], expr.dtype)
            return f"({cond} ? {a} : {b})"
        if fn in HORIZONTAL:
            return f"{self._horizontal(fn, args[0].dtype)}({self.expr(args[0])})"
        if fn == "lane":
            lane = const_value(args[1])
            assert lane is not None, "lane() takes a constant lane"
            return self.lane_of(self.expr(args[0]), lane, args[0].dtype)
        if fn in SHUFFLES:
            return self.shuffle(fn, self.expr(args[0]), self.expr(args[1]), expr.dtype)
        if fn == "vector":
            items = ", ".join(self.value(a, scalar(expr.dtype)) for a in args)
            return f"(({self.ctype(expr.dtype)}){{{items}}})"
        values = [self.value(a, expr.dtype) for a in args]
        if fn == "fma":
            return f"({values[0]} * {values[1]} + {values[2]})"
        power = _small_power(args[1]) if fn == "pow" and dtypes.is_float(expr.dtype) else None
        if power is not None:
            # A small integer power as multiplies: vector code, where a call to pow is not.
            return "(" + " * ".join([values[0]] * power) + ")"
        if fn in ("floor", "ceil") and not dtypes.is_float(scalar(expr.dtype)):
            return values[0]
        return f"{self.math(fn, expr.dtype)}({', '.join(values)})"


# The integer powers `pow(x, n)` renders as `x * x ...` (a gelu's cube, a variance's square).
_SMALL_POWERS = (1, 2, 3, 4)


def _small_power(exponent: Expr) -> int | None:
    """The exponent as one of `_SMALL_POWERS`, where it is that constant."""
    while isinstance(exponent, Cast):
        exponent = exponent.x
    if not isinstance(exponent, Const) or isinstance(exponent.value, bool):
        return None
    value = float(exponent.value)
    return int(value) if value in _SMALL_POWERS else None


def rounded(value: Expr, dtype: str) -> Expr:
    """What to round to 16-bit `dtype` where `value` is stored as one: casts to `dtype` at its
    top are redundant (rounding twice is rounding once), and each would cost a conversion
    and a widening (an fp16 GEMM's epilogue rounded every value three times)."""
    while isinstance(value, Cast) and value.dtype == dtype:
        value = value.x
    return value


def widened(expr: Expr) -> Expr:
    """`expr` without its exact widenings to float32."""
    while isinstance(expr, Cast) and expr.dtype == "float32":
        expr = expr.x
    return expr


def _exact(expr: Expr, dtype: str) -> bool:
    """Whether `expr` already holds a value of 16-bit `dtype` (so casting to it is a no-op)."""
    return scalar(expr.dtype) == dtype and isinstance(expr, Load | Cast)


def _paren(text: str) -> str:
    return f"({text})" if text.startswith("-") else text
