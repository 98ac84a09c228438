"""Building blocks of the GPU schedules: bindings, warp reductions, and the two kernels that
every non-contraction stage is made of.

* `per_output`: consecutive threads compute consecutive output elements (the stage's free
  axes flattened, so any rank works and neighbouring threads store neighbouring addresses),
  `items` of them per thread; a reduction's terms may be split over `split` threads along y,
  whose partial results meet in shared memory. With `threads=256, items=1, split=1` this is
  the fallback: one thread per output element, a plain loop over the reduce axes.
* `per_row`: `threads` threads (whole warps) cooperate on one output's reduction, each taking
  every `threads`-th term, then combine by warp shuffles and, across warps, through shared
  memory; `group` outputs per block along y. Rows that are contiguous in memory are read
  coalesced this way (softmax, layernorm and rmsnorm statistics).

Both take `rows` (index expressions of the stage's leading axes) when a fused row group's
kernel already binds one block per row: they then loop over that row's remaining outputs
with the block's threads and open no block binding. `fused_rows` builds that kernel.
"""

from __future__ import annotations

from collections.abc import Callable

from tunehub.compiler.analysis import Stage
from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import Binary, Call, Expr, Load, Var, substitute, walk
from tunehub.compiler.loop import (
    Assign,
    Barrier,
    Decl,
    For,
    If,
    Stmt,
    Store,
    add,
    all_of,
    as_expr,
    ceildiv,
    const,
    const_value,
    map_exprs,
    mul,
    seq,
    sub,
    var,
)
from tunehub.compiler.schedule.plan import Group
from tunehub.compiler.schedule.stage import (
    Context,
    Loop,
    accumulator_dtype,
    combine,
    identity,
    nest,
    reduce_body,
    term,
)
from tunehub.compiler.simplify import simplified
from tunehub.targets.gpu.limits import WARP

FALLBACK_THREADS = 256


def bind(ctx: Context, base: str, extent: Expr | int, kind: str) -> Loop:
    """A block or thread binding (`kind` e.g. `threadIdx.x`) over a fresh variable."""
    return Loop(ctx.fresh(base), as_expr(extent), kind)


def less(a: Expr, b: Expr) -> Expr:
    return Binary("<", a, b, "bool")


def equal(a: Expr, b: Expr) -> Expr:
    return Binary("==", a, b, "bool")


def div(a: Expr, n: int) -> Expr:
    """`a // n` for non-negative `a` and positive constant `n`."""
    value = const_value(a)
    if value is not None:
        return const(value // n)
    return a if n == 1 else Binary("//", a, const(n), INDEX)


def mod(a: Expr, n: int) -> Expr:
    """`a % n` for non-negative `a` and positive constant `n`."""
    value = const_value(a)
    if value is not None:
        return const(value % n)
    return const(0) if n == 1 else Binary("%", a, const(n), INDEX)


def outputs(stage: Stage, rows: tuple[Expr, ...]) -> Group:
    """The stage's axes not fixed by `rows`, flattened (the last varies fastest)."""
    free = list(zip(stage.axes, stage.shape, strict=True))[len(rows) :]
    return Group(tuple(a for a, _ in free), tuple(as_expr(e) for _, e in free))


def reduction(stage: Stage) -> Group:
    axes = stage.anchor.reduce_axes
    return Group(tuple(r.name for r in axes), tuple(as_expr(r.extent) for r in axes))


def at(stage: Stage, rows: tuple[Expr, ...], group: Group, flat: Expr) -> dict[str, Expr]:
    """The stage's index at flat output position `flat` of `group`."""
    return {**dict(zip(stage.axes, rows, strict=False)), **group.index(flat)}


def index_form(expr: Expr) -> Expr:
    """`expr`'s index arithmetic simplified as `lower` will, every variable in it taken as
    non-negative (in a GPU schedule each is a block or thread index, a loop counter from 0,
    a tile position made of those, or a symbol): the form in which two reads of one element,
    indexed two ways before `compiler.simplify` (the 8 values of an int4 word), are equal."""
    return simplified(expr, {e.name for e in walk(expr) if isinstance(e, Var)})


def guard(cond: Expr | None, body: Stmt) -> Stmt:
    """`body` under `cond` (None: always)."""
    return body if cond is None else If(cond, body)


def covers(extent: Expr, step: int) -> bool:
    """Whether a constant `extent` is a whole number of `step`s (no guard needed)."""
    value = const_value(extent)
    return value is not None and value % step == 0


def strided(ctx: Context, extent: Expr, start: Expr, step: int, unroll: int = 1) -> Loop:
    """A loop over the count of `start + n * step` values below `extent` (0 <= start < step),
    unrolled `unroll` times."""
    count = ceildiv(sub(extent, start), step)
    if unroll > 1:
        return Loop(ctx.fresh("r"), count, "unroll", unroll)
    return Loop(ctx.fresh("r"), count)


def warp_reduce(op: str, name: str, dtype: str) -> Stmt:
    """Combine local `name` across the warp by xor shuffles (every lane gets the result)."""
    value = Var(name, dtype)
    steps = []
    offset = WARP // 2
    while offset:
        shuffled = Call("shfl_xor", (value, const(offset)), dtype)
        steps.append(Assign(name, combine(op, value, shuffled)))
        offset //= 2
    return seq(steps)


# ----------------------------------------------------------------------------- per output


def per_output(
    stage: Stage,
    ctx: Context,
    rows: tuple[Expr, ...],
    threads: int,
    items: int = 1,
    split: int = 1,
    unroll: int = 1,
) -> Stmt:
    """Output elements over threads along x (see the module doc)."""
    group = outputs(stage, rows)
    size = group.extent
    per_block = threads if rows else threads * items
    block = [] if rows else [bind(ctx, "blk", ceildiv(size, per_block), "blockIdx.x")]
    passes = ceildiv(size, threads) if rows else const(items)
    u, e = ctx.fresh("u"), ctx.fresh("e")
    tx = bind(ctx, "tx", threads, "threadIdx.x")
    first = mul(var(block[0].var), const(items)) if block else const(0)
    position = Decl(e, INDEX, init=add(mul(add(first, var(u)), const(threads)), var(tx.var)))
    index = at(stage, rows, group, var(e))
    valid = None if covers(size, per_block) else less(var(e), size)
    op = stage.anchor.reduce_op
    if split == 1 or op is None:
        serial = [Loop("", const(0))] * (len(stage.anchor.reduce_axes) - 1)
        kinds = [*serial, Loop("", const(0), "unroll", unroll)] if unroll > 1 else []
        element = guard(valid, reduce_body(stage, ctx, index, kinds))
        kind = "unroll" if not rows and items > 1 else "serial"
        return nest(block, nest([tx], once(For(u, passes, seq(position, element), kind))))
    # Terms split over `split` y threads; the y = 0 threads combine the partial results.
    dtype = accumulator_dtype(stage)
    red, acc = ctx.fresh("red"), ctx.fresh("acc")
    ty, ty0 = bind(ctx, "ty", split, "threadIdx.y"), bind(ctx, "ty", 1, "threadIdx.y")
    terms = reduction(stage)
    loop = strided(ctx, terms.extent, var(ty.var), split, unroll)
    k = add(mul(var(loop.var), const(split)), var(ty.var))
    update = Assign(acc, combine(op, Var(acc, dtype), term(stage, {**index, **terms.index(k)})))
    slot = add(mul(var(ty.var), const(threads)), var(tx.var))
    partial = seq(
        position,
        Decl(acc, dtype, init=identity(op, dtype)),
        guard(valid, nest([loop], update)),
        Store(red, (slot,), Var(acc, dtype)),
    )
    y = ctx.fresh("y")
    other = Load(red, (add(mul(var(y), const(threads)), var(tx.var)),), dtype)
    spatial = tuple(index[a] for a in stage.axes)
    total = seq(
        Decl(acc, dtype, init=Load(red, (var(tx.var),), dtype)),
        For(y, const(split - 1), Assign(acc, combine(op, Var(acc, dtype), other)), start=const(1)),
        Store(stage.buffer, spatial, stage.finish(Var(acc, dtype), index)),
    )
    again = [Barrier()] if const_value(passes) != 1 else []
    body = seq(
        nest([ty, tx], partial),
        Barrier(),
        nest([ty0, tx], seq(position, guard(valid, total))),
        *again,
    )
    shared = Decl(red, dtype, (split * threads,), shared=True)
    return nest(block, seq(shared, once(For(u, passes, body))))


def once(loop: For) -> Stmt:
    """`loop`, or its body at 0 when it runs exactly once."""
    if const_value(loop.extent) == 1:
        zero: dict[str, Expr] = {loop.var: const(0)}
        return map_exprs(loop.body, lambda x: substitute(x, zero))
    return loop


# ----------------------------------------------------------------------------- per row


def per_row(
    stage: Stage,
    ctx: Context,
    rows: tuple[Expr, ...],
    threads: int,
    group: int = 1,
    unroll: int = 1,
) -> Stmt:
    """One output per `threads` threads along x, `group` outputs per block along y (see the
    module doc). `threads` is a multiple of the warp size."""
    op, dtype = stage.anchor.reduce_op, accumulator_dtype(stage)
    assert op is not None and threads % WARP == 0
    out = outputs(stage, rows)
    size = out.extent
    block = [] if rows else [bind(ctx, "blk", ceildiv(size, group), "blockIdx.x")]
    passes = size if rows else const(1)
    u, acc = ctx.fresh("u"), ctx.fresh("acc")
    ty = [bind(ctx, "ty", group, "threadIdx.y")] if group > 1 else []
    tx = bind(ctx, "tx", threads, "threadIdx.x")
    first = mul(var(block[0].var), const(group)) if block else var(u)
    e = add(first, var(ty[0].var)) if ty else first
    index = at(stage, rows, out, e)
    valid = None if rows or covers(size, group) else less(e, size)
    terms = reduction(stage)
    loop = strided(ctx, terms.extent, var(tx.var), threads, unroll)
    k = add(mul(var(loop.var), const(threads)), var(tx.var))
    value = Var(acc, dtype)
    update = Assign(acc, combine(op, value, term(stage, {**index, **terms.index(k)})))
    partial = seq(
        Decl(acc, dtype, init=identity(op, dtype)),
        guard(valid, nest([loop], update)),
        warp_reduce(op, acc, dtype),
    )
    lane0 = equal(var(tx.var), const(0))
    spatial = tuple(index[a] for a in stage.axes)
    done = guard(
        all_of([lane0] + ([valid] if valid is not None else [])),
        Store(stage.buffer, spatial, stage.finish(value, index)),
    )
    warps = threads // WARP
    if warps == 1:
        return nest(block, once(For(u, passes, nest(ty, nest([tx], seq(partial, done))))))
    # Across warps: lane 0 of each warp leaves its result in shared memory, warp 0 combines.
    red = ctx.fresh("red")
    base = mul(var(ty[0].var), const(warps)) if ty else const(0)
    slot = add(base, div(var(tx.var), WARP))
    leave = If(equal(mod(var(tx.var), WARP), const(0)), Store(red, (slot,), value))
    warp0 = Loop(tx.var, const(WARP), "threadIdx.x")  # the same variable as `tx`
    left = Load(red, (add(base, var(tx.var)),), dtype)
    gather = Call("where", (less(var(tx.var), const(warps)), left, identity(op, dtype)), dtype)
    final = seq(Decl(acc, dtype, init=gather), warp_reduce(op, acc, dtype), done)
    body = seq(
        nest(ty, nest([tx], seq(partial, leave))),
        Barrier(),
        nest(ty, nest([warp0], final)),
        *([Barrier()] if const_value(passes) != 1 else []),
    )
    shared = Decl(red, dtype, (group * warps,), shared=True)
    return nest(block, seq(shared, once(For(u, passes, body))))


# ----------------------------------------------------------------------------- fused rows


def fused_rows(
    ctx: Context, first: Stage, rows: int, members: Callable[[tuple[Expr, ...]], list[Stmt]]
) -> Stmt:
    """The kernel of a fused row group: one block per row (the `rows` leading axes of `first`
    flattened), running each member stage's block-level statements in turn, separated by
    barriers (a stage reads what the previous ones stored for its row)."""
    group = Group(first.axes[:rows], tuple(as_expr(e) for e in first.shape[:rows]))
    row = bind(ctx, "row", group.extent, "blockIdx.x")
    index = group.index(var(row.var))
    bodies = members(tuple(index[a] for a in group.axes))
    separated: list[Stmt] = []
    for n, body in enumerate(bodies):
        separated += [Barrier(), body] if n else [body]
    return nest([row], seq(separated))
