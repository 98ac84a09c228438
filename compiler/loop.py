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
  (GPU: every lane of the warp must execute them).

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
warp) and makes their memory writes visible; `Wmma` statements drive the tensor cores and
`Wgmma` statements Hopper's warpgroup tensor cores; `AsyncCopy` statements (sm_80+ `cp.async`)
copy global memory into shared memory while the thread goes on; `Mbarrier` statements (sm_90)
let some threads wait for others without a block-wide barrier.
A GPU function's workspaces are global buffers its caller allocates (see `compiler.kernel`).

Names: tensor and symbol names come from the signature and are mangled by the renderer;
every other name (loop variables, locals) is chosen by the lowering through a `Namer`, which
keeps them apart from the signature's names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field, replace

from compiler.dtypes import INDEX, compute_dtype
from compiler.ir import (
    PRECEDENCE,
    UNARY_PRECEDENCE,
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Extent,
    Load,
    Unary,
    Var,
    children,
    loads,
    transform,
    walk,
)

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


@dataclass(frozen=True, slots=True)
class For:
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
class Seq:
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class If:
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(frozen=True, slots=True)
class Store:
    """`buffer[indices] = value`, converted to the buffer's dtype."""

    buffer: str
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, slots=True)
class Assign:
    """`name = value` for a declared local scalar."""

    name: str
    value: Expr


@dataclass(frozen=True, slots=True)
class Decl:
    """A local scalar (`shape == ()`, optionally initialized) or a local array of constant
    shape (a register tile when `dtype` is a vector dtype), visible to the statements after
    it in the same `Seq`."""

    name: str
    dtype: str
    shape: tuple[int, ...] = ()
    init: Expr | None = None
    shared: bool = False  # GPU: one array per block in shared memory (may hold 16-bit floats)


@dataclass(frozen=True, slots=True)
class Barrier:
    """GPU: every thread of the block waits here; memory writes made before it are visible to
    all of them after it. Only where the whole block gets to it (not under a thread binding
    that runs on part of the block, nor a condition that differs between threads). `warp`:
    the same for the threads of one warp only (`__syncwarp`), where all its lanes get to it."""

    warp: bool = False


WMMA_OPS = ("fragment", "fill", "load", "mma", "store")
WMMA_USES = ("a", "b", "acc")


@dataclass(frozen=True, slots=True)
class Wmma:
    """GPU tensor cores (CUDA WMMA, 16x16x16 fragments), warp-collective: every lane of the
    warp executes it with the same operands. `op`:

    * `fragment`: declares fragment `frag` of `use` `a` (a 16x16 tile of A, row-major in
      memory), `b` (of B, column-major: element (k, n) at `n * ld + k`) or `acc` (fp32), of
      element `dtype` (float16 or bfloat16 for `a`/`b`, float32 for `acc`); `layout` (`row`
      or `col`) overrides the memory layout of an `a` or `b` fragment;
    * `fill`: every element of `frag` set to 0;
    * `load`: `frag` (a or b) from the shared array `buffer` at element `offset`, leading
      dimension `ld` (a multiple of 8; the address 32-byte aligned);
    * `mma`: `frag` (acc) += `a` x `b`;
    * `store`: `frag` (acc) into `buffer` (float32) at `offset`, row-major with `ld`.
    """

    op: str
    frag: str
    use: str = ""
    dtype: str = ""
    buffer: str = ""
    offset: Expr = ZERO
    ld: int = 0
    a: str = ""
    b: str = ""
    layout: str = ""

    def __post_init__(self) -> None:
        if self.op not in WMMA_OPS:
            raise ValueError(f"unknown WMMA operation {self.op!r}")
        if self.op == "fragment" and self.use not in WMMA_USES:
            raise ValueError(f"unknown WMMA fragment use {self.use!r}")
        if self.layout not in ("", "row", "col"):
            raise ValueError(f"unknown WMMA layout {self.layout!r}")


ASYNC_OPS = ("copy", "commit", "wait")
ASYNC_SIZES = (4, 8, 16)


@dataclass(frozen=True, slots=True)
class AsyncCopy:
    """GPU, sm_80 and later (`cp.async`): copies from global into shared memory that the
    thread does not wait for, so the next tile's loads overlap the current tile's math. `op`:

    * `copy`: `size` bytes (4, 8 or 16) from the address of `src` (a `Load` of a global
      buffer, in that buffer's dtype) into the shared array `buffer` at element `offset`, raw
      (no conversion); only the first `valid` bytes are read (None: all of them), the rest
      are zero-filled. Both addresses are `size`-aligned;
    * `commit`: this thread's copies since the last commit form one group;
    * `wait`: until at most `pending` of this thread's groups are still in flight. Other
      threads' copies are visible only after a `Barrier` that follows their waits.
    """

    op: str
    buffer: str = ""
    offset: Expr = ZERO
    src: Load | None = None
    size: int = 0
    valid: Expr | None = None
    pending: int = 0

    def __post_init__(self) -> None:
        if self.op not in ASYNC_OPS:
            raise ValueError(f"unknown async copy operation {self.op!r}")
        if self.op == "copy" and (self.src is None or self.size not in ASYNC_SIZES):
            raise ValueError("an async copy needs a source and a size of 4, 8 or 16 bytes")


WGMMA_OPS = ("mma", "fence", "commit", "wait", "proxy_fence")
CORE_ROW_BYTES = 16  # a core matrix: 8 rows of 16 contiguous bytes, 128 bytes in all


@dataclass(frozen=True, slots=True)
class SharedMatrix:
    """A factor of a warpgroup MMA in shared memory, as its matrix descriptor describes it:
    16-bit elements in the 128-byte swizzled layout (`compiler.schedule.gpu.wgmma` gives it).
    `k_major`: rows of 128 bytes run along k (else along M or N). `lbo`/`sbo` are the
    descriptor's byte strides: `sbo` between groups of 8 rows, `lbo` (M/N-major only) between
    128-byte column blocks. The matrix starts at element `offset` of the shared array
    `buffer`, which is 1024-byte aligned."""

    buffer: str
    offset: Expr
    k_major: bool
    lbo: int
    sbo: int


@dataclass(frozen=True, slots=True)
class Wgmma:
    """GPU, sm_90 (Hopper's `wgmma`), collective over a warpgroup: four consecutive warps,
    the first a multiple of 4, all executing it alike. `op`:

    * `mma`: issues `acc[acc_offset : acc_offset + n / 2] += a x b` (a 64 x 16 by 16 x `n`
      product of `dtype`, float16 or bfloat16, into the float32 local array `acc`; each
      thread holds the elements of the accumulator layout `compiler.schedule.gpu.wgmma`
      describes), which runs in the background until a `wait`;
    * `fence`: before the first `mma` after the thread touched its accumulators;
    * `commit`: the `mma`s issued since the last commit form one group;
    * `wait`: until at most `pending` groups are in flight (then the accumulators and the
      shared tiles they read are free);
    * `proxy_fence`: makes this thread's writes to shared memory (stores and `cp.async`)
      visible to the tensor cores, which read through another path; before the barrier
      that precedes the `mma`s reading them.

    `fence` and `wait` name the accumulators (`acc`, all `acc_size` of them): the compiler
    must not move their reads and writes across either, as they change under it meanwhile.
    """

    op: str
    acc: str = ""
    acc_offset: int = 0
    n: int = 0
    dtype: str = ""
    a: SharedMatrix | None = None
    b: SharedMatrix | None = None
    pending: int = 0
    acc_size: int = 0

    def __post_init__(self) -> None:
        if self.op not in WGMMA_OPS:
            raise ValueError(f"unknown wgmma operation {self.op!r}")
        if self.op == "mma" and (self.a is None or self.b is None or self.n % 8 or self.n > 256):
            raise ValueError("a wgmma needs both factors in shared memory and n in 8..256")


MBARRIER_OPS = ("init", "arrive", "arrive_copies", "wait")


@dataclass(frozen=True, slots=True)
class Mbarrier:
    """GPU, sm_90: a barrier object in shared memory (`mbarrier`), element `index` of the
    shared int64 array `buffer`, that lets threads wait for others without stopping the
    block. It counts arrivals; when `count` have arrived its phase completes and it rearms
    for the next. `op`:

    * `init`: arms it for `count` arrivals per phase (one thread, before a `Barrier`);
    * `arrive`: one arrival; this thread's memory writes before it are visible to threads
      whose `wait` returns after the phase completes;
    * `arrive_copies`: one arrival, made once every `AsyncCopy` this thread issued before it
      has landed (the thread goes on at once);
    * `wait`: until the phase of parity `parity` (phases alternate 0, 1, 0, ...; waiting on
      parity 1 before the first phase completes returns at once) has completed.
    """

    op: str
    buffer: str
    index: Expr = ZERO
    count: int = 0
    parity: Expr = ZERO

    def __post_init__(self) -> None:
        if self.op not in MBARRIER_OPS:
            raise ValueError(f"unknown mbarrier operation {self.op!r}")
        if self.op == "init" and self.count < 1:
            raise ValueError("an mbarrier counts at least one arrival")


@dataclass(frozen=True, slots=True)
class Prefetch:
    """A hint to bring `buffer[indices]` into cache (never faults, even past the end): the
    register tile issues it a few iterations ahead of the panel it streams."""

    buffer: str
    indices: tuple[Expr, ...]


Stmt = (
    For
    | Seq
    | If
    | Store
    | Assign
    | Decl
    | Prefetch
    | Barrier
    | Wmma
    | AsyncCopy
    | Wgmma
    | Mbarrier
)


# ----------------------------------------------------------------------------- functions


@dataclass(frozen=True, slots=True)
class Buffer:
    name: str
    dtype: str
    shape: tuple[Extent, ...]


@dataclass(frozen=True, slots=True)
class Workspace:
    """A heap buffer of the function (aligned to 64 bytes). `per_thread`: one copy per thread,
    for scratch that a parallel loop's iterations must not share (e.g. packed tiles)."""

    name: str
    dtype: str
    shape: tuple[Extent, ...]
    per_thread: bool = False


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


# ----------------------------------------------------------------------------- index arithmetic
# Smart constructors that fold constants, so schedules can build `jo * 16 + ji` without
# littering the output with `* 1` and `+ 0`.


def const(value: int) -> Const:
    return Const(value, INDEX)


def var(name: str) -> Var:
    return Var(name, INDEX)


def as_expr(extent: Extent | Expr) -> Expr:
    """An extent (literal or symbol name) or expression as an index expression."""
    if isinstance(extent, int):
        return const(extent)
    if isinstance(extent, str):
        return var(extent)
    return extent


def const_value(expr: Expr) -> int | None:
    return expr.value if isinstance(expr, Const) and isinstance(expr.value, int) else None


def add(a: Expr, b: Expr) -> Expr:
    ca, cb = const_value(a), const_value(b)
    if ca is not None and cb is not None:
        return const(ca + cb)
    if ca == 0:
        return b
    if cb == 0:
        return a
    return Binary("+", a, b, INDEX)


def sub(a: Expr, b: Expr) -> Expr:
    ca, cb = const_value(a), const_value(b)
    if ca is not None and cb is not None:
        return const(ca - cb)
    if cb == 0:
        return a
    if a == b:
        return const(0)
    return Binary("-", a, b, INDEX)


def mul(a: Expr, b: Expr) -> Expr:
    ca, cb = const_value(a), const_value(b)
    if ca is not None and cb is not None:
        return const(ca * cb)
    if ca == 0 or cb == 0:
        return const(0)
    if ca == 1:
        return b
    if cb == 1:
        return a
    return Binary("*", a, b, INDEX)


def end(loop: For) -> Expr:
    """The exclusive upper bound of a loop."""
    return add(loop.start, loop.extent)


def ceildiv(a: Expr, b: int) -> Expr:
    """`ceil(a / b)` for non-negative `a` and positive constant `b`."""
    ca = const_value(a)
    if ca is not None:
        return const(-(-ca // b))
    if b == 1:
        return a
    return Binary("//", add(a, const(b - 1)), const(b), INDEX)


def minimum(a: Expr, b: Expr) -> Expr:
    ca, cb = const_value(a), const_value(b)
    if ca is not None and cb is not None:
        return const(min(ca, cb))
    if a == b:
        return a
    return Call("min", (a, b), INDEX)


def product(extents: Iterable[Expr]) -> Expr:
    total: Expr = const(1)
    for extent in extents:
        total = mul(total, extent)
    return total


def flat_index(indices: tuple[Expr, ...], shape: tuple[Expr, ...]) -> Expr:
    """Row-major element offset of `indices` in a buffer of `shape`."""
    if len(indices) == 1:
        return indices[0]
    offset: Expr = const(0)
    for index, extent in zip(indices, shape, strict=True):
        offset = add(mul(offset, extent), index)
    return offset


# ----------------------------------------------------------------------------- names


# Words a generated name must not be: C, C++ and CUDA keywords a lowering might pick.
_KEYWORDS_TEXT = """auto bool break case char const continue default do double else enum extern
float for goto if inline int long register restrict return short signed sizeof static struct
switch typedef union unsigned void volatile while class new delete this template namespace
dim3 threadIdx blockIdx blockDim gridDim warpSize float2 float3 float4 int2 int3 int4 uint2
uint4 half"""
_KEYWORDS = frozenset(_KEYWORDS_TEXT.split())


class Namer:
    """Fresh identifiers for loop variables and locals, distinct from `reserved` (the
    signature's names) and from each other. Generated names are letters and digits only (no
    `_`): the renderer mangles signature names and its own names with `_`, so no generated
    name can meet them."""

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._taken = set(reserved) | _KEYWORDS

    def __call__(self, base: str) -> str:
        base = re.sub(r"[^A-Za-z0-9]", "", base)
        base = base if base[:1].isalpha() else f"v{base}"
        name, n = base, 0
        while name in self._taken:
            n += 1
            name = f"{base}{n}"
        self._taken.add(name)
        return name


# ----------------------------------------------------------------------------- traversal


def child_stmts(stmt: Stmt) -> tuple[Stmt, ...]:
    """The statements directly nested in `stmt`, in order."""
    if isinstance(stmt, For):
        return (stmt.body,)
    if isinstance(stmt, Seq):
        return stmt.body
    if isinstance(stmt, If):
        return (stmt.then,) if stmt.orelse is None else (stmt.then, stmt.orelse)
    return ()


def stmts(stmt: Stmt) -> Iterator[Stmt]:
    """Every statement of the tree, parents before children."""
    yield stmt
    for child in child_stmts(stmt):
        yield from stmts(child)


def exprs(stmt: Stmt) -> tuple[Expr, ...]:
    """The expressions a statement holds itself (not those of nested statements)."""
    if isinstance(stmt, For):
        return (stmt.start, stmt.extent)
    if isinstance(stmt, If):
        return (stmt.cond,)
    if isinstance(stmt, Store):
        return (*stmt.indices, stmt.value)
    if isinstance(stmt, Prefetch):
        return stmt.indices
    if isinstance(stmt, Assign):
        return (stmt.value,)
    if isinstance(stmt, Decl) and stmt.init is not None:
        return (stmt.init,)
    if isinstance(stmt, Wmma) and stmt.op in ("load", "store"):
        return (stmt.offset,)
    if isinstance(stmt, AsyncCopy) and stmt.src is not None:
        return (stmt.offset, stmt.src, *(() if stmt.valid is None else (stmt.valid,)))
    if isinstance(stmt, Wgmma) and stmt.a is not None and stmt.b is not None:
        return (stmt.a.offset, stmt.b.offset)
    if isinstance(stmt, Mbarrier):
        return (stmt.index, stmt.parity)
    return ()


def buffers_used(stmt: Stmt) -> set[str]:
    """Names of the buffers and local arrays the tree reads or writes."""
    used = {s.buffer for s in stmts(stmt) if isinstance(s, Store | Prefetch)}
    used.update(s.buffer for s in stmts(stmt) if isinstance(s, Wmma | AsyncCopy) and s.buffer)
    for s in stmts(stmt):
        if isinstance(s, Wgmma) and s.a is not None and s.b is not None:
            used.update((s.acc, s.a.buffer, s.b.buffer))
        elif isinstance(s, Mbarrier):
            used.add(s.buffer)
    return used | buffers_loaded(stmt)


def buffers_loaded(stmt: Stmt) -> set[str]:
    """Names of the buffers and local arrays the tree reads through loads."""
    return {ld.tensor for s in stmts(stmt) for e in exprs(s) for ld in loads(e)}


def map_exprs(stmt: Stmt, fn: Callable[[Expr], Expr]) -> Stmt:
    """The tree with `fn` applied to every expression its statements hold."""
    if isinstance(stmt, For):
        body = map_exprs(stmt.body, fn)
        return replace(stmt, start=fn(stmt.start), extent=fn(stmt.extent), body=body)
    if isinstance(stmt, Seq):
        return Seq(tuple(map_exprs(s, fn) for s in stmt.body))
    if isinstance(stmt, If):
        orelse = None if stmt.orelse is None else map_exprs(stmt.orelse, fn)
        return If(fn(stmt.cond), map_exprs(stmt.then, fn), orelse)
    if isinstance(stmt, Store):
        return Store(stmt.buffer, tuple(fn(i) for i in stmt.indices), fn(stmt.value))
    if isinstance(stmt, Prefetch):
        return Prefetch(stmt.buffer, tuple(fn(i) for i in stmt.indices))
    if isinstance(stmt, Assign):
        return Assign(stmt.name, fn(stmt.value))
    if isinstance(stmt, Barrier):
        return stmt
    if isinstance(stmt, Wmma):
        return replace(stmt, offset=fn(stmt.offset)) if stmt.op in ("load", "store") else stmt
    if isinstance(stmt, AsyncCopy):
        if stmt.src is None:
            return stmt
        src = fn(stmt.src)
        assert isinstance(src, Load), "an async copy's source stays a load"
        valid = None if stmt.valid is None else fn(stmt.valid)
        return replace(stmt, offset=fn(stmt.offset), src=src, valid=valid)
    if isinstance(stmt, Mbarrier):
        return replace(stmt, index=fn(stmt.index), parity=fn(stmt.parity))
    if isinstance(stmt, Wgmma):
        if stmt.a is None or stmt.b is None:
            return stmt
        a, b = replace(stmt.a, offset=fn(stmt.a.offset)), replace(stmt.b, offset=fn(stmt.b.offset))
        return replace(stmt, a=a, b=b)
    if stmt.init is not None:
        return replace(stmt, init=fn(stmt.init))
    return stmt


def hoist_loads(loop: For, fresh: Callable[[str], str], buffers: Collection[str]) -> Stmt:
    """`loop` preceded by locals that hold the reads of `buffers` it repeats unchanged: reads
    made on every iteration (not under `If`, `where` or the right of `and`/`or`, which may
    guard an out-of-bounds index) of a buffer the loop does not write, at indices that use no
    variable bound inside it. A compiler would keep such values in registers anyway, but
    gcc's partial redundancy elimination can otherwise reshape a loop past `omp simd`."""
    inner = list(stmts(loop))
    bound = {s.var for s in inner if isinstance(s, For)}
    bound |= {s.name for s in inner if isinstance(s, Decl | Assign)}
    written = {s.buffer for s in inner if isinstance(s, Store)}
    found: dict[Load, str] = {}
    for s in _unguarded(loop):
        for root in exprs(s):
            for ld in _unguarded_loads(root):
                names = {e.name for i in ld.indices for e in walk(i) if isinstance(e, Var)}
                if (
                    ld.tensor in buffers
                    and ld.tensor not in written
                    and lanes(ld.dtype) == 1
                    and not names & bound
                    and ld not in found
                ):
                    found[ld] = fresh(ld.tensor)
    if not found:
        return loop
    decls = [Decl(name, compute_dtype(ld.dtype), init=ld) for ld, name in found.items()]
    hoisted = {ld: Var(name, ld.dtype) for ld, name in found.items()}
    body = map_exprs(
        loop, lambda e: transform(e, lambda n: hoisted.get(n) if isinstance(n, Load) else None)
    )
    return seq(*decls, body)


def _unguarded(stmt: Stmt) -> Iterator[Stmt]:
    """The statements of the tree that run whenever it does (not inside an `If`)."""
    yield stmt
    if not isinstance(stmt, If):
        for child in child_stmts(stmt):
            yield from _unguarded(child)


def _unguarded_loads(expr: Expr) -> Iterator[Load]:
    if isinstance(expr, Load):
        yield expr
    if isinstance(expr, Call) and expr.fn == "where":
        yield from _unguarded_loads(expr.args[0])
        return
    if isinstance(expr, Binary) and expr.op in ("and", "or"):
        yield from _unguarded_loads(expr.a)
        return
    for child in children(expr):
        yield from _unguarded_loads(child)


def seq(*items: Stmt | Iterable[Stmt]) -> Stmt:
    """A `Seq` of the statements given (flattening nested sequences and lists)."""
    out: list[Stmt] = []
    for item in items:
        for stmt in [item] if isinstance(item, Stmt) else item:
            out.extend(stmt.body if isinstance(stmt, Seq) else (stmt,))
    return out[0] if len(out) == 1 else Seq(tuple(out))


# ----------------------------------------------------------------------------- printing


def format_expr(expr: Expr) -> str:
    """A compact, fully parenthesized-where-needed text of an expression (for dumps)."""
    if isinstance(expr, Const):
        return repr(expr.value)
    if isinstance(expr, Var):
        return expr.name
    if isinstance(expr, Load):
        lanes_note = f"<{lanes(expr.dtype)}>" if lanes(expr.dtype) > 1 else ""
        return f"{expr.tensor}{lanes_note}[{', '.join(format_expr(i) for i in expr.indices)}]"
    if isinstance(expr, Cast):
        return f"{expr.dtype}({format_expr(expr.x)})"
    if isinstance(expr, Unary):
        symbol = {"neg": "-", "not": "not ", "invert": "~"}[expr.op]
        return f"{symbol}{_operand(expr.x, UNARY_PRECEDENCE)}"
    if isinstance(expr, Binary):
        prec = PRECEDENCE[expr.op]
        return f"{_operand(expr.a, prec)} {expr.op} {_operand(expr.b, prec + 1)}"
    return f"{expr.fn}({', '.join(format_expr(a) for a in expr.args)})"


def _operand(expr: Expr, prec: int) -> str:
    text = format_expr(expr)
    if isinstance(expr, Binary) and PRECEDENCE[expr.op] < prec:
        return f"({text})"
    return text


def format_stmt(stmt: Stmt, depth: int = 0) -> str:
    """An indented, Python-like dump of a statement tree (for tests and debugging)."""
    pad = "  " * depth
    if isinstance(stmt, For):
        start = "" if const_value(stmt.start) == 0 else f"{format_expr(stmt.start)} + "
        notes = [stmt.kind] if stmt.kind != "serial" else []
        notes += [f"factor={stmt.factor}"] if stmt.factor else []
        notes += [f"{op}:{name}" for op, name in stmt.reduction]
        note = f"  # {', '.join(notes)}" if notes else ""
        head = f"{pad}for {stmt.var} in {start}range({format_expr(stmt.extent)}):{note}"
        return f"{head}\n{format_stmt(stmt.body, depth + 1)}"
    if isinstance(stmt, Seq):
        return "\n".join(format_stmt(s, depth) for s in stmt.body)
    if isinstance(stmt, If):
        text = f"{pad}if {format_expr(stmt.cond)}:\n{format_stmt(stmt.then, depth + 1)}"
        if stmt.orelse is not None:
            text += f"\n{pad}else:\n{format_stmt(stmt.orelse, depth + 1)}"
        return text
    if isinstance(stmt, Store):
        index = ", ".join(format_expr(i) for i in stmt.indices)
        return f"{pad}{stmt.buffer}[{index}] = {format_expr(stmt.value)}"
    if isinstance(stmt, Assign):
        return f"{pad}{stmt.name} = {format_expr(stmt.value)}"
    if isinstance(stmt, Prefetch):
        return f"{pad}prefetch {stmt.buffer}[{', '.join(format_expr(i) for i in stmt.indices)}]"
    if isinstance(stmt, Barrier):
        return f"{pad}barrier" + (" (warp)" if stmt.warp else "")
    if isinstance(stmt, AsyncCopy):
        if stmt.op == "wait":
            return f"{pad}async wait {stmt.pending}"
        if stmt.op == "commit":
            return f"{pad}async commit"
        assert stmt.src is not None
        valid = "" if stmt.valid is None else f" valid={format_expr(stmt.valid)}"
        head = f"{pad}async copy {stmt.size} {stmt.buffer}[{format_expr(stmt.offset)}]"
        return f"{head} = {format_expr(stmt.src)}{valid}"
    if isinstance(stmt, Mbarrier):
        at = f"{stmt.buffer}[{format_expr(stmt.index)}]"
        if stmt.op == "init":
            return f"{pad}mbarrier {at} init {stmt.count}"
        if stmt.op == "wait":
            return f"{pad}mbarrier {at} wait parity {format_expr(stmt.parity)}"
        return f"{pad}mbarrier {at} {stmt.op}"
    if isinstance(stmt, Wgmma):
        if stmt.a is None or stmt.b is None:
            return f"{pad}wgmma {stmt.op}" + (f" {stmt.pending}" if stmt.op == "wait" else "")
        factors = [
            f"{m.buffer}[{format_expr(m.offset)}] {'k' if m.k_major else 'mn'}-major "
            f"lbo={m.lbo} sbo={m.sbo}"
            for m in (stmt.a, stmt.b)
        ]
        head = f"{pad}wgmma {stmt.acc}[{stmt.acc_offset}:] += 64x16x{stmt.n} {stmt.dtype}"
        return f"{head} {factors[0]} x {factors[1]}"
    if isinstance(stmt, Wmma):
        if stmt.op == "fragment":
            layout = f" {stmt.layout}" if stmt.layout else ""
            return f"{pad}{stmt.frag}: fragment {stmt.use} {stmt.dtype}{layout}"
        if stmt.op == "mma":
            return f"{pad}mma {stmt.frag} += {stmt.a} x {stmt.b}"
        if stmt.op == "fill":
            return f"{pad}fill {stmt.frag} 0"
        return f"{pad}{stmt.op} {stmt.frag} {stmt.buffer}[{format_expr(stmt.offset)}] ld={stmt.ld}"
    shape = f"[{', '.join(map(str, stmt.shape))}]" if stmt.shape else ""
    init = f" = {format_expr(stmt.init)}" if stmt.init is not None else ""
    scope = "shared " if stmt.shared else ""
    return f"{pad}{stmt.name}: {scope}{stmt.dtype}{shape}{init}"
