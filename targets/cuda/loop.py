"""CUDA's intrinsic statements of the loop IR (see `compiler.loop.nodes.Stmt`) and their dumps;
`targets.cuda.render` prints them as CUDA.

`Wmma` statements drive the tensor cores and `Wgmma` statements Hopper's warpgroup tensor
cores; `AsyncCopy` statements (sm_80+ `cp.async`) copy global memory into shared memory while
the thread goes on; `TensorCopy` statements (sm_90 TMA) have the copy engine bring a whole box
of a global buffer into shared memory, or store one back (`BulkGroup` waits for those stores);
`Mbarrier` statements (sm_90) let some threads wait for others without a block-wide barrier,
and a `NamedBarrier` stops only the warps that meet at it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tunehub.compiler.ir import Expr, Load
from tunehub.compiler.loop import BUFFER, ZERO, Stmt, format_expr, format_stmt

WMMA_OPS = ("fragment", "fill", "load", "mma", "store")
WMMA_USES = ("a", "b", "acc")


@dataclass(frozen=True, slots=True)
class Wmma(Stmt):
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
    buffer: str = field(default="", metadata=BUFFER)
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
class AsyncCopy(Stmt):
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
    buffer: str = field(default="", metadata=BUFFER)
    offset: Expr = ZERO
    src: Load | None = None
    size: int = 0
    valid: Expr | None = None
    pending: int = 0

    def __post_init__(self) -> None:
        if self.op not in ASYNC_OPS:
            raise ValueError(f"unknown async copy operation {self.op!r}")
        if self.src is not None and not isinstance(self.src, Load):
            raise ValueError("an async copy's source is a load")
        if self.op == "copy" and (self.src is None or self.size not in ASYNC_SIZES):
            raise ValueError("an async copy needs a source and a size of 4, 8 or 16 bytes")


WGMMA_OPS = ("mma", "fence", "commit", "wait", "proxy_fence")
CORE_ROW_BYTES = 16  # a core matrix: 8 rows of 16 contiguous bytes, 128 bytes in all


@dataclass(frozen=True, slots=True)
class SharedMatrix:
    """A factor of a warpgroup MMA in shared memory, as its matrix descriptor describes it:
    16-bit elements in the 128-byte swizzled layout (`targets.cuda.schedule.wgmma` gives it).
    `k_major`: rows of 128 bytes run along k (else along M or N). `lbo`/`sbo` are the
    descriptor's byte strides: `sbo` between groups of 8 rows, `lbo` (M/N-major only) between
    128-byte column blocks. The matrix starts at element `offset` of the shared array
    `buffer`, which is 1024-byte aligned."""

    buffer: str = field(metadata=BUFFER)
    offset: Expr
    k_major: bool
    lbo: int
    sbo: int


@dataclass(frozen=True, slots=True)
class Wgmma(Stmt):
    """GPU, sm_90 (Hopper's `wgmma`), collective over a warpgroup: four consecutive warps,
    the first a multiple of 4, all executing it alike. `op`:

    * `mma`: issues `acc[acc_offset : acc_offset + n / 2] += a x b` (a 64 x 16 by 16 x `n`
      product of `dtype`, float16 or bfloat16, into the float32 local array `acc`; each
      thread holds the elements of the accumulator layout `targets.cuda.schedule.wgmma`
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
    acc: str = field(default="", metadata=BUFFER)
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


@dataclass(frozen=True, slots=True)
class TensorCopy(Stmt):
    """GPU, sm_90 (TMA, `cp.async.bulk.tensor`), issued by one thread: the copy engine reads
    the box of `box` elements per dimension (innermost first) of the global buffer `tensor`
    at element coordinates `coords` (innermost first) and writes it into the shared array
    `buffer` from element `offset` on (1024-byte aligned), in the 128-byte swizzled layout of
    `targets.cuda.schedule.wgmma` (a box row is 128 bytes: `box[0]` elements of 2 or 4
    bytes). Elements outside the buffer arrive as zeros. When the box has landed, its bytes
    count against the transactions `Mbarrier("expect")` announced on element `index` of the
    mbarrier array `barrier`. With `store` the copy goes the other way, from shared memory
    into the buffer, elements outside it left out, in the thread's current bulk group
    (`BulkGroup`; no barrier). The launch passes the buffer's tensor map (`tensor_map`) as a
    kernel parameter."""

    buffer: str = field(metadata=BUFFER)
    offset: Expr
    tensor: str = field(metadata=BUFFER)
    box: tuple[int, ...]
    coords: tuple[Expr, ...]
    barrier: str = field(default="", metadata=BUFFER)
    index: Expr = ZERO
    store: bool = False

    def __post_init__(self) -> None:
        if bool(self.barrier) == self.store:
            raise ValueError("a tensor copy completes on a barrier, a tensor store on none")
        if not 1 <= len(self.box) <= 5 or len(self.coords) != len(self.box):
            raise ValueError("a tensor copy has 1 to 5 dimensions, a coordinate for each")
        if any(not 1 <= b <= 256 for b in self.box):
            raise ValueError("a tensor copy's box holds 1 to 256 elements per dimension")


BULK_OPS = ("commit", "wait_read", "wait")


@dataclass(frozen=True, slots=True)
class BulkGroup(Stmt):
    """GPU, sm_90: the thread's tensor stores (`TensorCopy(store=True)`). `op`: `commit` makes
    those issued since the last commit a group; `wait_read` waits until every group has read
    its shared memory (which may then be rewritten); `wait` until every group is done."""

    op: str

    def __post_init__(self) -> None:
        if self.op not in BULK_OPS:
            raise ValueError(f"unknown bulk group operation {self.op!r}")


@dataclass(frozen=True, slots=True)
class NamedBarrier(Stmt):
    """GPU: a barrier among `count` threads (whole warps) of the block, number `index` (1 to
    15, the same for every thread that meets there; 0 is the block's `Barrier`): a
    warpgroup's threads meeting without the others."""

    index: Expr
    count: int

    def __post_init__(self) -> None:
        if self.count % 32 or self.count < 32:
            raise ValueError("a named barrier is met by whole warps")


def tensor_map(copy: TensorCopy) -> str:
    """The kernel parameter holding the tensor map a copy or store goes through: one per
    buffer and box, shared by every copy of that box."""
    return f"{copy.tensor}_map_{'x'.join(map(str, copy.box))}"


MBARRIER_OPS = ("init", "fence_init", "arrive", "arrive_copies", "expect", "wait")


@dataclass(frozen=True, slots=True)
class Mbarrier(Stmt):
    """GPU, sm_90: a barrier object in shared memory (`mbarrier`), element `index` of the
    shared int64 array `buffer`, that lets threads wait for others without stopping the
    block. It counts arrivals; when `count` have arrived its phase completes and it rearms
    for the next. `op`:

    * `init`: arms it for `count` arrivals per phase (one thread, before a `Barrier`);
    * `fence_init`: makes this thread's `init`s visible to the copy engine, which completes
      `TensorCopy`s on them (after them, before the `Barrier`);
    * `arrive`: one arrival; this thread's memory writes before it are visible to threads
      whose `wait` returns after the phase completes;
    * `arrive_copies`: one arrival, made once every `AsyncCopy` this thread issued before it
      has landed (the thread goes on at once);
    * `expect`: no arrival, but the current phase also waits for `count` bytes of
      `TensorCopy`s to land (issued after it, as the phase's arrivals are made);
    * `wait`: until the phase of parity `parity` (phases alternate 0, 1, 0, ...; waiting on
      parity 1 before the first phase completes returns at once) has completed.
    """

    op: str
    buffer: str = field(metadata=BUFFER)
    index: Expr = ZERO
    count: int = 0
    parity: Expr = ZERO

    def __post_init__(self) -> None:
        if self.op not in MBARRIER_OPS:
            raise ValueError(f"unknown mbarrier operation {self.op!r}")
        if self.op in ("init", "expect") and self.count < 1:
            raise ValueError(f"an mbarrier {self.op} counts at least one arrival or byte")


# ----------------------------------------------------------------------------- dumps


@format_stmt.register
def _wmma(stmt: Wmma, depth: int = 0) -> str:
    pad = "  " * depth
    if stmt.op == "fragment":
        layout = f" {stmt.layout}" if stmt.layout else ""
        return f"{pad}{stmt.frag}: fragment {stmt.use} {stmt.dtype}{layout}"
    if stmt.op == "mma":
        return f"{pad}mma {stmt.frag} += {stmt.a} x {stmt.b}"
    if stmt.op == "fill":
        return f"{pad}fill {stmt.frag} 0"
    at = f"{stmt.buffer}[{format_expr(stmt.offset)}]"
    return f"{pad}{stmt.op} {stmt.frag} {at} ld={stmt.ld}"


@format_stmt.register
def _async_copy(stmt: AsyncCopy, depth: int = 0) -> str:
    pad = "  " * depth
    if stmt.op == "wait":
        return f"{pad}async wait {stmt.pending}"
    if stmt.op == "commit":
        return f"{pad}async commit"
    assert stmt.src is not None
    valid = "" if stmt.valid is None else f" valid={format_expr(stmt.valid)}"
    head = f"{pad}async copy {stmt.size} {stmt.buffer}[{format_expr(stmt.offset)}]"
    return f"{head} = {format_expr(stmt.src)}{valid}"


@format_stmt.register
def _wgmma(stmt: Wgmma, depth: int = 0) -> str:
    pad = "  " * depth
    if stmt.a is None or stmt.b is None:
        return f"{pad}wgmma {stmt.op}" + (f" {stmt.pending}" if stmt.op == "wait" else "")
    factors = [
        f"{m.buffer}[{format_expr(m.offset)}] {'k' if m.k_major else 'mn'}-major "
        f"lbo={m.lbo} sbo={m.sbo}"
        for m in (stmt.a, stmt.b)
    ]
    head = f"{pad}wgmma {stmt.acc}[{stmt.acc_offset}:] += 64x16x{stmt.n} {stmt.dtype}"
    return f"{head} {factors[0]} x {factors[1]}"


@format_stmt.register
def _tensor_copy(stmt: TensorCopy, depth: int = 0) -> str:
    coords = ", ".join(format_expr(c) for c in stmt.coords)
    shared = f"{stmt.buffer}[{format_expr(stmt.offset)}]"
    box = f"{stmt.tensor} box {'x'.join(map(str, stmt.box))} at ({coords})"
    if stmt.store:
        return f"{'  ' * depth}tensor store {box} = {shared}"
    barrier = f"{stmt.barrier}[{format_expr(stmt.index)}]"
    return f"{'  ' * depth}tensor copy {shared} = {box} on {barrier}"


@format_stmt.register
def _bulk_group(stmt: BulkGroup, depth: int = 0) -> str:
    return f"{'  ' * depth}bulk {stmt.op}"


@format_stmt.register
def _named_barrier(stmt: NamedBarrier, depth: int = 0) -> str:
    return f"{'  ' * depth}barrier {format_expr(stmt.index)} over {stmt.count}"


@format_stmt.register
def _mbarrier(stmt: Mbarrier, depth: int = 0) -> str:
    at = f"{'  ' * depth}mbarrier {stmt.buffer}[{format_expr(stmt.index)}]"
    if stmt.op in ("init", "expect"):
        return f"{at} {stmt.op} {stmt.count}"
    if stmt.op == "wait":
        return f"{at} wait parity {format_expr(stmt.parity)}"
    return f"{at} {stmt.op}"
