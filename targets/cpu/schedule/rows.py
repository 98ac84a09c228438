"""A fused row group on the CPU: one parallel loop over the rows (its outer axes collapsed),
each row computing every member stage, and consecutive members that share nothing and loop
alike in one loop (`siblings`: a layernorm's mean and the two sums of its variance, one pass
over the row; `variance.one_pass`). Two ways to have the next row's data on its way while
this row is stored, each a group knob:

* `pipeline` (the default): the innermost row axis in blocks; within a block each row's first
  stage (its first pass over the row) runs in step with the row before's last stage (its
  stores), chunk by chunk (`interleave`). A row program is bound by moving rows: run one
  pass after the other and the first pass's loads wait while the stores drain, and the stores
  wait on a sum the loads have not finished. Where the two stages' loops share no chunking
  (softmax's rows of 1000 at 16 lanes), the rows run one after another as without it.
* `prefetch`: the last stage's innermost loops that read the current row split into cache
  lines, each headed by a prefetch of the same columns one row on (past the last row it
  points outside the buffer, which a prefetch may).

Side by side on an AVX-512 EPYC, one thread, default configs: rmsnorm over 128 rows of 768
floats 11.36 us with neither, 9.68 with `prefetch`. `pipeline` against `prefetch`, in the
tuner's runner: layernorm 128 x 768 17.9 -> 16.2 us, softmax 64 x 1000 77.2 -> 73.2 (the
prefetch off), rmsnorm within noise (9.5 both; 9.07 -> 8.31 us in a C loop calling the two
kernels in turn, where a plain copy of the rows takes 7.3).
"""

from __future__ import annotations

from math import gcd, lcm

from tunehub.compiler import dtypes
from tunehub.compiler.analysis import RowGroup
from tunehub.compiler.backend import RowBodies
from tunehub.compiler.ir import Expr, Load, Var, loads, substitute, walk
from tunehub.compiler.loop import (
    Decl,
    For,
    Prefetch,
    Seq,
    Stmt,
    Store,
    add,
    as_expr,
    buffers_loaded,
    ceildiv,
    const,
    const_value,
    exprs,
    map_exprs,
    map_stmts,
    minimum,
    mul,
    seq,
    stmts,
    sub,
    var,
)
from tunehub.compiler.schedule.stage import Context, Loop, nest
from tunehub.compiler.simplify import simplified
from tunehub.compiler.space.space import Config
from tunehub.targets.cpu.schedule.injective import MAX_COLLAPSE

LINE_BYTES = 64
# The fewest vectors (or unrolled groups) a chunk of a reduction loop holds (`interleave`).
REDUCED_GRANULES = 4
SPLIT_KINDS = ("serial", "unroll", "vectorize")


def fused_rows(ctx: Context, group: RowGroup, knobs: Config, members: RowBodies) -> Stmt:
    """The group's rows in one parallel loop nest, each row computing every member stage."""
    first = ctx.analysis.stages[group.first]
    loops = [
        Loop(ctx.fresh(axis), as_expr(size))
        for axis, size in zip(first.axes[: group.rows], first.shape[: group.rows], strict=True)
    ]
    body = siblings(members(tuple(var(lp.var) for lp in loops)))
    if knobs["pipeline"] and len(body) > 1:  # merged into one statement: nothing to overlap
        pipelined = _pipelined(ctx, loops, int(knobs["pipeline"]), body)
        if pipelined is not None:
            return pipelined
    if knobs["prefetch"]:
        body[-1] = prefetch_next_row(ctx, body[-1], loops[-1].var)
    return nest(_parallel(loops), seq(body))


def siblings(body: list[Stmt]) -> list[Stmt]:
    """`body` with each run of consecutive statements that share nothing and loop alike
    merged into one (a layernorm's row sum and the two sums of its variance: one pass over
    the row, `variance.one_pass`)."""
    merged: list[Stmt] = []
    for stmt in body:
        both = _merged(merged[-1], stmt) if merged else None
        if both is None:
            merged.append(stmt)
        else:
            merged[-1] = both
    return merged


def _merged(a: Stmt, b: Stmt) -> Stmt | None:
    """`a` and `b` as one statement whose loops run both bodies: where each is its locals'
    set-up, a run of loops with the same headers (extent, start, kind, factor), and what
    follows (its stores), and neither touches what the other stores (their locals' names
    are apart: `Context.fresh`). Else None."""
    first, second = _items(a), _items(b)
    la, lb = _loop_run(first), _loop_run(second)
    if la is None or lb is None or la.stop - la.start != lb.stop - lb.start:
        return None
    stored_a, stored_b = _stored(first), _stored(second)
    if stored_a & (buffers_loaded(b) | stored_b) or stored_b & buffers_loaded(a):
        return None
    loops = []
    for x, y in zip(first[la], second[lb], strict=True):
        assert isinstance(x, For) and isinstance(y, For)  # a loop run
        if (x.extent, x.start, x.kind, x.factor) != (y.extent, y.start, y.kind, y.factor):
            return None
        body, reduction = seq(x.body, _at(y.body, {y.var: var(x.var)})), x.reduction + y.reduction
        loops.append(For(x.var, x.extent, body, x.kind, x.start, x.factor, reduction))
    before = [*first[: la.start], *second[: lb.start]]
    return seq(*before, *loops, *first[la.stop :], *second[lb.stop :])


def _at(stmt: Stmt, values: dict[str, Expr]) -> Stmt:
    """`stmt` with variables replaced by expressions."""
    return map_exprs(stmt, lambda e: substitute(e, values))


def _loop_run(items: list[Stmt]) -> slice | None:
    """Where the loops among `items` are, if they are one unbroken run."""
    at = [n for n, item in enumerate(items) if isinstance(item, For)]
    return slice(at[0], at[-1] + 1) if at and at[-1] - at[0] + 1 == len(at) else None


def _parallel(loops: list[Loop]) -> list[Loop]:
    """`loops` with the outermost (at most `MAX_COLLAPSE`) collapsed into one parallel loop."""
    outer = [Loop(lp.var, lp.extent, "parallel") for lp in loops[:MAX_COLLAPSE]]
    return outer + loops[MAX_COLLAPSE:]


def _pipelined(ctx: Context, loops: list[Loop], size: int, body: list[Stmt]) -> Stmt | None:
    """The innermost row axis in blocks of `size` rows (the parallel loop runs over blocks);
    within a block, each row's first stage is computed while the row before it runs its last
    stage, the two stages' longest loops in step (`interleave`). The block's first row's
    first stage runs ahead of its loop, and its last row computes its own first stage again
    (the same value, stored after the last stage has read it): no row is guarded, since
    gcc stopped vectorizing loops under guards on the row (loop splitting; softmax 3.3x
    slower). None where the two loops share no chunking."""
    outer, last = loops[:-1], loops[-1]
    block = ctx.fresh(f"{last.var}b")
    first = mul(var(block), const(size))
    stop = minimum(add(first, const(size)), last.extent)
    here = var(last.var)

    def head(row: Expr) -> Stmt:
        return _at(body[0], {last.var: row})

    zipped = interleave(ctx, head(minimum(add(here, const(1)), sub(stop, const(1)))), body[-1])
    if zipped is None:
        return None
    rows = For(last.var, sub(stop, first), seq(*body[1:-1], zipped), start=first)
    tiled = _parallel([*outer, Loop(block, ceildiv(last.extent, size))])
    return nest(tiled, seq(head(first), rows))


def interleave(ctx: Context, a: Stmt, b: Stmt) -> Stmt | None:
    """`a` then `b`, two statements that touch nothing the other writes, with the longest
    loop of each run in step: both split into the same number of chunks (`_most_chunks`),
    one chunk of each in turn, so that one loop's loads overlap the other's stores. None
    where there are no such loops (or the trip counts are not constants), or where `a` could
    not run twice on one row (the block's last row) with `b` between: `a` must store only
    after its loop, and nothing it reads back."""
    first, second = _items(a), _items(b)
    la, lb = _longest(first), _longest(second)
    chunks = _most_chunks(la, lb) if la is not None and lb is not None else 1
    if la is None or lb is None or chunks < 2:
        return None
    ia, ib = first.index(la), second.index(lb)
    if _stored(first[: ia + 1]) or _stored(first) & buffers_loaded(a):
        return None
    step = ctx.fresh("chunk")
    zipped = For(step, const(chunks), seq(_chunk(la, step, chunks), _chunk(lb, step, chunks)))
    return seq(first[:ia], second[:ib], zipped, first[ia + 1 :], second[ib + 1 :])


def _stored(items: list[Stmt]) -> set[str]:
    """The buffers `items` store to (not the local arrays they declare)."""
    every = [s for item in items for s in stmts(item)]
    local = {s.name for s in every if isinstance(s, Decl)}
    return {s.buffer for s in every if isinstance(s, Store) and s.buffer not in local}


def _items(stmt: Stmt) -> list[Stmt]:
    return list(stmt.body) if isinstance(stmt, Seq) else [stmt]


def _longest(items: list[Stmt]) -> For | None:
    """The loop among `items` with the largest constant trip count (at least 2)."""
    loops = [s for s in items if isinstance(s, For) and _trips(s) >= 2]
    return max(loops, key=_trips, default=None)


def _trips(loop: For) -> int:
    """`loop`'s trip count where it is a constant, else 0."""
    return const_value(simplified(loop.extent, set())) or 0


def _granule(loop: For) -> int:
    """The iterations a chunk of `loop` must hold a multiple of: its vector length or
    unroll factor (16 where the compiler picks the vector length), else 1."""
    if loop.kind == "vectorize":
        return loop.factor or 16
    return loop.factor if loop.kind == "unroll" and loop.factor else 1


def _chunks(loop: For) -> int:
    """How many whole chunks (of its vectors or unrolled groups) `loop` splits into."""
    trips, granule = _trips(loop), _granule(loop)
    return trips // granule if trips % granule == 0 else 1


def _most_chunks(a: For, b: For) -> int:
    """The most chunks both loops split into, each chunk whole vectors or unrolled groups of
    each, and at least `REDUCED_GRANULES` of a loop with a reduction clause: every chunk of
    it combines its vector's lanes again (a softmax's row max in chunks of one vector beside
    the output's division: 93 us against 65 in chunks of five, 64 x 1000, AVX2)."""
    granules = [(_chunks(lp), REDUCED_GRANULES if lp.reduction else 1) for lp in (a, b)]
    chunks = gcd(granules[0][0], granules[1][0])
    while chunks > 1 and any(total // chunks < least for total, least in granules):
        chunks = max(d for d in range(1, chunks) if chunks % d == 0)
    return chunks


def _chunk(loop: For, step: str, chunks: int) -> For:
    """Chunk `step` of `chunks` equal parts of `loop`, as the same kind of loop."""
    size = _trips(loop) // chunks
    start = add(loop.start, mul(var(step), const(size)))
    return For(loop.var, const(size), loop.body, loop.kind, start, loop.factor, loop.reduction)


def prefetch_next_row(ctx: Context, stmt: Stmt, row: str) -> Stmt:
    """`stmt` with each innermost loop that reads buffers at row `row` and at its own
    index split into cache lines, each headed by prefetches of those reads at row `row` + 1."""

    def split(loop: Stmt) -> Stmt:
        if not isinstance(loop, For) or loop.kind not in SPLIT_KINDS:
            return loop
        if any(isinstance(s, For) for s in stmts(loop.body)):
            return loop
        reads = _row_reads(loop, row)
        if not reads:
            return loop
        smallest = min(_itemsize(ctx, ld.tensor) for ld in reads)
        line = lcm(max(LINE_BYTES // smallest, 1), max(loop.factor, 1))
        outer = ctx.fresh(f"{loop.var}l")
        first = add(loop.start, mul(var(outer), const(line)))
        ahead = {row: add(var(row), const(1)), loop.var: first}
        hints = dict.fromkeys(  # one per distinct read, in order
            Prefetch(ld.tensor, tuple(substitute(i, ahead) for i in ld.indices)) for ld in reads
        )
        extent = minimum(const(line), sub(loop.extent, mul(var(outer), const(line))))
        inner = For(loop.var, extent, loop.body, loop.kind, first, loop.factor, loop.reduction)
        return For(outer, ceildiv(loop.extent, line), seq(*hints, inner))

    return map_stmts(stmt, split)


def _row_reads(loop: For, row: str) -> list[Load]:
    """The buffer reads in `loop` whose indices use both the row and the loop's variable."""
    found = []
    for s in stmts(loop.body):
        for e in exprs(s):
            for ld in loads(e):
                used = {v.name for i in ld.indices for v in walk(i) if isinstance(v, Var)}
                if row in used and loop.var in used:
                    found.append(ld)
    return found


def _itemsize(ctx: Context, buffer: str) -> int:
    """Bytes per element of a tensor or stage buffer (a scratch buffer counts as float32)."""
    try:
        return dtypes.itemsize(ctx.analysis.program.buffer(buffer).dtype)
    except KeyError:
        return 4
