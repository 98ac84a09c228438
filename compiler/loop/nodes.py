"""The lowered loop IR: what schedules produce and renderers print.

Expressions are `compiler.ir` nodes, reused as they are, with three extensions:

* **Locals.** `Var(name, dtype)` also reads a local scalar (declared by `Decl`), and `Load`
  also reads a local array element. Loop variables are `Var(name)` of dtype int64.
* **Vector values.** A dtype may be a vector type `"<scalar>x<lanes>"` (e.g. `"float32x16"`,
  see `vector`). A `Binary`/`Unary`/`Call` with a vector dtype works lane by lane;
  `Cast(vector_dtype, scalar)` broadcasts; `Cast(vector_dtype, vector)` converts lane types;
  `Load(buf, idx, "float32x16")` on a buffer of *scalars* reads 16 contiguous elements starting
  at `idx` (no alignment assumed), and a `Store` of a vector value writes them. A local array
  declared with a vector dtype (`Decl("c", "float32x16", (8, 2))`) holds a register tile:
  `Load("c", (i, j), "float32x16")` / `Store("c", (i, j), v)` access its elements.
* **Extra calls.** `fma(a, b, c)` is `a * b + c` (scalar or vector), `hsum`/`hmax`/`hmin`/
  `hprod` reduce a vector to its scalar, `lane(v, Const(l))` extracts one lane;
  `shfl_xor(v, Const(m))` / `shfl_down(v, Const(d))` read `v` of another lane of the warp
  (GPU: every lane of the warp must execute them); `vector(c0, c1, ...)` is a vector of
  those scalars, one per lane.

Indices of a `Load`/`Store` on a buffer either have the buffer's rank (row-major
linearization is the renderer's job) or are a single flat element offset.

Statements: `For` (serial, parallel, unroll or vectorize; extents are expressions, so symbols
and `min(...)` tails are fine), `Seq`, `If`, `Store`, `Assign` (a local), `Decl` (a local
scalar or small array; locals hold compute dtypes, float32 for 16-bit float data),
`Prefetch` (a cache hint). A `Function` has the kernel's arguments, its symbols (int64
params), and its `Workspace`s: aligned heap buffers allocated once per call, or once per thread
(`per_thread`: each thread of a parallel loop sees its own slice under the same name).

GPU concepts (CUDA dialect only): a `For` of kind `blockIdx.x|y|z` or `threadIdx.x|y|z` is a
*binding*, not a loop: its variable is that block or thread index. Each top-level statement
of a GPU function is one kernel launch, headed by its block bindings (the grid: one block per
value of each); thread bindings may appear anywhere inside (the block: the largest extent of
each, a smaller one runs on the first threads only). Statements outside thread bindings run
on every thread of the block, so a local declared there is one per thread (a register tile
that lives across phases). `Decl(..., shared=True)` is an array in shared memory, one per
block; unlike other locals it may hold float16/bfloat16 (storage: a `Store` rounds to it, a
`Load` reads float32). `Barrier` waits for every thread of the block (`warp=True`: of the
warp) and makes their memory writes visible. A GPU function's workspaces are global buffers
its caller allocates (see `compiler.kernel`).

A target's own intrinsics are statements defined beside its renderer (`Stmt` says what one
takes): CUDA's tensor cores, asynchronous copies and mbarriers live in `targets.cuda.loop`.

Names: tensor and symbol names come from the signature and are mangled by the renderer;
every other name (loop variables, locals) is chosen by the lowering through a `Namer`, which
keeps them apart from the signature's names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import Const, Expr, Extent

BLOCK_KINDS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_KINDS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
LOOP_KINDS = ("serial", "parallel", "unroll", "vectorize", *BLOCK_KINDS, *THREAD_KINDS)
SHUFFLES = ("shfl_xor", "shfl_down")
ZERO = Const(0, INDEX)
HORIZONTAL = {"hsum": "sum", "hmax": "max", "hmin": "min", "hprod": "prod"}
_VECTOR = re.compile(r"^([a-z]+[0-9]*?)x([0-9]+)$")


# ----------------------------------------------------------------------------- vector dtypes


def vector(dtype: str, lanes: int) -> str:
    """The vector dtype of `lanes` values of `dtype` (`lanes == 1` is the scalar itself)."""
    return dtype if lanes == 1 else f"{dtype}x{lanes}"


def lanes(dtype: str) -> int:
    match = _VECTOR.match(dtype)
    return int(match.group(2)) if match else 1


def scalar(dtype: str) -> str:
    """The element dtype of a vector dtype (a scalar dtype is its own element)."""
    match = _VECTOR.match(dtype)
    return match.group(1) if match else dtype


# ----------------------------------------------------------------------------- statements
# Field metadata: the field names a buffer or local array that the statement reads or writes
# (`traversal.buffers_used` collects them; reads through a `Load` count without it).
BUFFER = {"buffer": True}


@dataclass(frozen=True, slots=True)
class Stmt:
    """The base of every statement, each a frozen dataclass. The walks (`compiler.loop.traversal`)
    read a statement's fields: nested statements (a `Stmt` or a tuple of them), expressions (an
    `Expr`, a tuple of them, or the fields of an operand record, a dataclass such as CUDA's
    `SharedMatrix`) and the buffers it names (fields marked `BUFFER`); other fields are data
    to them. So a new statement, here or a target's own, is its dataclass, a printer
    (`printing.format_stmt.register`) and a rule (`_stmt_<Type>`) in each renderer printing it.
    """


@dataclass(frozen=True, slots=True)
class For(Stmt):
    """`for var in [start, start + extent)`.

    kind: `serial`; `parallel` (nested parallel loops directly inside one another collapse
    into one parallel loop; a `factor` also vectorizes it with that length); `unroll`
    (`factor` times, 0 = fully); `vectorize` (`factor` is the preferred vector length, 0 =
    the compiler's). `reduction` names the locals a parallel or vectorized loop combines
    across iterations, as (op, name) with op in sum/max/min/prod. GPU binding kinds
    (`blockIdx.x`, `threadIdx.y`, ...) are described in the module doc.
    """

    var: str
    extent: Expr
    body: Stmt
    kind: str = "serial"
    start: Expr = ZERO
    factor: int = 0
    reduction: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in LOOP_KINDS:
            raise ValueError(f"unknown loop kind {self.kind!r}")


@dataclass(frozen=True, slots=True)
class Seq(Stmt):
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class If(Stmt):
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(frozen=True, slots=True)
class Store(Stmt):
    """`buffer[indices] = value`, converted to the buffer's dtype."""

    buffer: str = field(metadata=BUFFER)
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, slots=True)
class Assign(Stmt):
    """`name = value` for a declared local scalar."""

    name: str
    value: Expr


@dataclass(frozen=True, slots=True)
class Decl(Stmt):
    """A local scalar (`shape == ()`, optionally initialized) or a local array of constant
    shape (a register tile when `dtype` is a vector dtype), visible to the statements after
    it in the same `Seq`."""

    name: str
    dtype: str
    shape: tuple[int, ...] = ()
    init: Expr | None = None
    shared: bool = False  # GPU: one array per block in shared memory (may hold 16-bit floats)


@dataclass(frozen=True, slots=True)
class Barrier(Stmt):
    """GPU: every thread of the block waits here; memory writes made before it are visible to
    all of them after it. Only where the whole block gets to it (not under a thread binding
    that runs on part of the block, nor a condition that differs between threads). `warp`:
    the same for the threads of one warp only (`__syncwarp`), where all its lanes get to it."""

    warp: bool = False


@dataclass(frozen=True, slots=True)
class Prefetch(Stmt):
    """A hint to bring `buffer[indices]` into cache (never faults, even past the end): the
    register tile issues it a few iterations ahead of the panel it streams."""

    buffer: str = field(metadata=BUFFER)
    indices: tuple[Expr, ...]


# ----------------------------------------------------------------------------- functions


@dataclass(frozen=True, slots=True)
class Buffer:
    name: str
    dtype: str
    shape: tuple[Extent, ...]


@dataclass(frozen=True, slots=True)
class Workspace:
    """A heap buffer of the function (aligned to 64 bytes). `per_thread`: one copy per thread,
    for scratch that a parallel loop's iterations must not share (e.g. packed tiles).
    `zeroed`: filled with zeros when the function starts (state a thread keeps across the
    iterations it runs, such as which panel it last packed)."""

    name: str
    dtype: str
    shape: tuple[Extent, ...]
    per_thread: bool = False
    zeroed: bool = False


@dataclass(frozen=True)
class Function:
    """A kernel entry point: `inputs` then `outputs` as pointer arguments, then the symbols."""

    name: str
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    symbols: tuple[str, ...]
    body: Stmt
    workspaces: tuple[Workspace, ...] = ()
    _buffers: dict[str, Buffer | Workspace] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        buffers: dict[str, Buffer | Workspace] = {}
        declared: tuple[Buffer | Workspace, ...] = (*self.inputs, *self.outputs, *self.workspaces)
        for buf in declared:
            if buf.name in buffers or buf.name in self.symbols:
                raise ValueError(f"name {buf.name!r} is declared twice")
            buffers[buf.name] = buf
        object.__setattr__(self, "_buffers", buffers)

    def buffer(self, name: str) -> Buffer | Workspace | None:
        return self._buffers.get(name)
