"""The CPU's flash-attention template: an attention chain (`compiler.attention`) in one pass
over key blocks with an online softmax, no `[rows, keys]` buffer.

A work item is one batch and head index, or a `chunk` of its query rows (`parallel` outer
loops collapsed into one OpenMP loop). Each of its rows keeps a running max `m` and sum `l`,
and its output row is its accumulator. Per block of `kb` keys, the item packs the block's
key side transposed once (`[E, kb]`, zeros past the last key), then, per block of `qb` query
rows:

1. a register tile of `qb` rows x `kb / vec` vectors sums the scores over the head
   dimension (per step one broadcast query value and `kb / vec` fmas a row, the loop
   unrolled by `unroll`), as the packed GEMM's microkernel does;
2. each row turns its scores into logits in place (the chain's own scale and masks) with
   their max `mb`, takes `m' = max(m, mb)`, `alpha = exp(m - m')` and `p = exp(logit - m')`
   (the chain's own term), and adds the `p` to `l * alpha`, vectorized over the keys;
3. a register tile of `qb` rows x `Ev / vec` vectors rescales the output rows by `alpha`
   and adds every key's `p * v[key]` (one vector load of the value row per key and vector).

The rows past the last whole block of `qb` take the same steps in a 1-row tile. Where the
chain is causal (`Pattern.causal`), the whole query blocks before a key block's first key
skip it: about half the work. The item
ends with `out = out / l` (the output's epilogue applied). A row whose logits are all `-inf`
so far subtracts 0 instead of `m'`, so that no `-inf - -inf` poisons a row that later keys
make finite. Per-thread scratch: the pack (`E * kb`), a block's scores (`qb * kb`), and each
row's `m` and `l`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from tunehub.compiler import attention
from tunehub.compiler.analysis import Stage
from tunehub.compiler.attention import COL, DEPTH, Pattern
from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.ir import Binary, Call, Cast, Const, Expr, Load, Var, substitute
from tunehub.compiler.loop import (
    Assign,
    Decl,
    For,
    Stmt,
    Store,
    add,
    as_expr,
    const,
    const_value,
    minimum,
    mul,
    seq,
    sub,
    var,
    vector,
)
from tunehub.compiler.schedule.stage import Context, Loop, Schedule, Split, identity, nest, split
from tunehub.compiler.schedule.vectorize import vectorize
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.cpu.isa import vector_registers, vector_widths
from tunehub.targets.cpu.schedule.injective import MAX_COLLAPSE

# The statements of one query row `r` of a work item, given the row's index expressions.
PerRow = Callable[[Expr, tuple[Expr, ...]], Stmt]

QUERY_BLOCKS = (1, 2, 4, 8)
KEY_BLOCKS = (16, 32, 64, 128, 256)
UNROLLS = (1, 2, 4)
CHUNKS = (0, 32, 128)  # query rows per work item (0: all of them)
MAX_ROW = 1024  # the widest value row (`Ev`) an accumulator tile holds
TILE_REGISTERS = 2  # a register tile's vectors, at most, in multiples of the registers


class FlashAttention(Schedule):
    kind = "flash"
    summary = "attention in one pass over key blocks with an online softmax (flash attention)"
    knob_docs: ClassVar[Mapping[str, str]] = {
        "qb": "query rows per block: the register tiles' rows, sharing each packed key block",
        "kb": "keys per block: the score tile's columns",
        "vec": "vector lanes of the register tiles and of the key loops",
        "unroll": "unroll factor of the score tile's loop over the head dimension",
        "chunk": "query rows per work item (0: every row of a head), each packing the keys",
        "parallel": "outer loops (batch, heads, query chunks) collapsed into one parallel loop",
    }

    def why_not(self, stage: Stage, target: Target) -> str | None:
        found = attention.of(stage)
        width, depth = stage.shape[-1], found.depth
        if not isinstance(width, int) or width > MAX_ROW or not isinstance(depth, int):
            return f"the head dimensions are not constants (values of at most {MAX_ROW})"
        if not self._widths(stage, target):
            return "the value rows are not a whole number of vectors"
        if vectorize(found.values, COL, self._widths(stage, target)[0]) is None:
            return "the value rows are not contiguous (a vector load)"
        return None

    def _widths(self, stage: Stage, target: Target) -> tuple[int, ...]:
        width = stage.shape[-1]
        return tuple(w for w in vector_widths(target, stage.dtype) if width % w == 0)

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        outer = len(stage.shape) - 2  # batch and head axes
        return {
            "qb": QUERY_BLOCKS,
            "kb": KEY_BLOCKS,
            "vec": self._widths(stage, target),
            "unroll": UNROLLS,
            "chunk": CHUNKS,
            "parallel": tuple(range(min(MAX_COLLAPSE, outer + 1) + 1)),
        }

    def naive(self, stage: Stage, target: Target) -> Config:
        return {name: values[0] for name, values in self.knobs(stage, target).items()}

    def default(self, stage: Stage, target: Target) -> Config:
        knobs = self.knobs(stage, target)
        config = {"qb": 4, "kb": 64, "vec": knobs["vec"][-1], "unroll": 1, "chunk": 0}
        config["parallel"] = self._loops(stage, config)
        while self.check(stage, target, config) and int(config["qb"]) > 1:
            config["qb"] = int(config["qb"]) // 2
        return config

    def _loops(self, stage: Stage, config: Config) -> int:
        """The work items' loops: batch and head axes, and the query chunks if any."""
        return min(MAX_COLLAPSE, len(stage.shape) - 2 + bool(config["chunk"]))

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        if int(config["parallel"]) > self._loops(stage, config):
            return "parallel: more loops than the batch, head and chunk loops"
        lanes, qb = int(config["vec"]), int(config["qb"])
        tiles = qb * max(int(config["kb"]), int(stage.shape[-1])) // lanes
        if tiles > TILE_REGISTERS * vector_registers(target):
            return f"qb x kb / vec and qb x Ev / vec fill at most {TILE_REGISTERS}x the registers"
        return None

    def seeds(self, stage: Stage, target: Target, symbols: Mapping[str, int]) -> list[Config]:
        default = self.default(stage, target)
        chunked = {**default, "chunk": CHUNKS[-1]}
        chunked["parallel"] = self._loops(stage, chunked)
        seeds = [default, {**default, "kb": 128}, {**default, "qb": 8}, chunked]
        return [s for s in seeds if self.check(stage, target, s) is None]

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        found = attention.of(stage)
        return _Lowering(found, config, ctx).item()


class _Lowering:
    """The loop nest of one attention chain under one config (see the module doc)."""

    def __init__(self, found: Pattern, config: Config, ctx: Context) -> None:
        self.p, self.ctx = found, ctx
        self.qb, self.kb = int(config["qb"]), int(config["kb"])
        self.lanes, self.unroll = int(config["vec"]), int(config["unroll"])
        self.chunk, self.parallel = int(config["chunk"]), int(config["parallel"])
        self.dtype = found.out.dtype
        self.vdt = vector(self.dtype, self.lanes)
        self.width = int(found.out.shape[-1])
        self.depth = int(found.depth)
        queries = self.chunk or found.maxes.shape[-1]
        self.m = ctx.scratch("m", self.dtype, (queries,), per_thread=True)
        self.l = ctx.scratch("l", self.dtype, (queries,), per_thread=True)
        self.s = ctx.scratch("scores", self.dtype, (self.qb * self.kb,), per_thread=True)
        self.kt = ctx.scratch("keys", self.dtype, (self.depth * self.kb,), per_thread=True)
        self.alpha = ctx.fresh("alpha")

    def item(self) -> Stmt:
        """The outer loops over batch and heads (and query chunks) around one work item."""
        shape = self.p.maxes.shape
        queries = as_expr(shape[-1])
        loops = [Loop(self.ctx.fresh("b"), as_expr(e)) for e in shape[:-1]]
        first: Expr = const(0)
        length = queries
        if self.chunk:
            chunks = split(self.ctx, "q", queries, self.chunk)
            loops.append(Loop(chunks.outer, chunks.outer_extent))
            first, length = mul(var(chunks.outer), const(self.chunk)), chunks.inner_extent
        loops = [
            Loop(lp.var, lp.extent, "parallel") if n < self.parallel else lp
            for n, lp in enumerate(loops)
        ]
        item = _Item(tuple(var(lp.var) for lp in loops[: len(shape) - 1]), first, length)
        keys = split(self.ctx, "k", as_expr(self.p.scores.shape[-1]), self.kb)
        total = const_value(length)
        full = (
            const(total // self.qb)
            if total is not None
            else (Binary("//", length, const(self.qb), INDEX) if self.qb > 1 else length)
        )
        qo, rest = self.ctx.fresh("qo"), self.ctx.fresh("qr")
        whole = seq(*self._block(keys, item, mul(var(qo), const(self.qb)), self.qb))
        skipped = self._skipped(keys, item, full)
        blocks = [For(qo, sub(full, skipped), whole, start=skipped)]
        done = mul(full, const(self.qb))
        if self.qb > 1 and const_value(sub(length, done)) != 0:
            blocks.append(
                For(rest, sub(length, done), seq(*self._block(keys, item, add(done, var(rest)), 1)))
            )
        body = seq(
            Decl(self.alpha, self.dtype, (self.qb,)),
            self._rows(item, self._start),
            For(keys.outer, keys.outer_extent, seq(self._pack(keys, item), *blocks)),
            self._rows(item, self._finish),
        )
        return nest(loops, body)

    def _skipped(self, keys: Split, item: _Item, full: Expr) -> Expr:
        """The item's whole query blocks that a causal chain's key block leaves out: those
        whose rows all come before its first key (`Pattern.causal`); none otherwise."""
        if not self.p.causal:
            return const(0)
        first_key = mul(var(keys.outer), const(self.kb))
        before = Call("max", (sub(first_key, item.first), const(0)), INDEX)
        return minimum(Binary("//", before, const(self.qb), INDEX), full)

    def _rows(self, item: _Item, each: PerRow) -> Stmt:
        """A loop over the item's query rows, `each(t, index)` per row (`t` from 0)."""
        t = self.ctx.fresh("t")
        return For(t, item.length, each(var(t), item.row(var(t))))

    def _start(self, t: Expr, index: tuple[Expr, ...]) -> Stmt:
        c = self.ctx.fresh("c")
        zero = Const(0, self.dtype)
        out = Store(self.p.out.buffer, (*index, var(c)), zero)
        return seq(
            Store(self.m, (t,), identity("max", self.dtype)),
            Store(self.l, (t,), zero),
            self._vectorized(c, out),
        )

    def _pack(self, keys: Split, item: _Item) -> Stmt:
        """The block's key side transposed into `kt[d, key]`, zeros past the last key."""
        d, j = self.ctx.fresh("d"), self.ctx.fresh("j")
        at = self.p.places(item.row(const(0)), _at(keys, var(j)))
        at[DEPTH] = var(d)
        inside = Binary("<", _at(keys, var(j)), as_expr(self.p.scores.shape[-1]), "bool")
        zero = Const(0, self.dtype)
        value = Call("where", (inside, substitute(self.p.keyed, at), zero), self.dtype)
        store = Store(self.kt, (add(mul(var(d), const(self.kb)), var(j)),), value)
        return For(j, const(self.kb), For(d, const(self.depth), store))

    def _block(self, keys: Split, item: _Item, start: Expr, rows: int) -> list[Stmt]:
        """`rows` query rows from the item's row `start` against one key block."""
        indices = [item.row(add(start, const(r))) for r in range(rows)]
        r = self.ctx.fresh("r")
        t = add(start, var(r))
        softmax = For(r, const(rows), seq(*self._row_softmax(keys, var(r), t, item.row(t))))
        return [*self._scores(indices), softmax, *self._accumulate(keys, indices)]

    def _scores(self, indices: list[tuple[Expr, ...]]) -> list[Stmt]:
        """The block's scores of `indices`'s rows, summed in registers, stored to `s`."""
        ctx, vdt, n = self.ctx, self.vdt, self.kb // self.lanes
        tile = [[ctx.fresh(f"s{r}x{v}") for v in range(n)] for r in range(len(indices))]
        d = ctx.fresh("d")
        columns = [ctx.fresh(f"k{v}") for v in range(n)]
        step: list[Stmt] = [
            Decl(
                columns[v],
                vdt,
                init=Load(self.kt, (add(mul(var(d), const(self.kb)), const(v * self.lanes)),), vdt),
            )
            for v in range(n)
        ]
        for r, index in enumerate(indices):
            at = self.p.places(index, const(0))
            at[DEPTH] = var(d)
            q = Var(ctx.fresh("q"), vdt)
            step.append(Decl(q.name, vdt, init=Cast(vdt, substitute(self.p.query, at))))
            step += [
                Assign(
                    tile[r][v], Call("fma", (q, Var(columns[v], vdt), Var(tile[r][v], vdt)), vdt)
                )
                for v in range(n)
            ]
        kind = "unroll" if self.unroll > 1 else "serial"
        zero = Cast(vdt, Const(0, self.dtype))
        return [
            *(Decl(name, vdt, init=zero) for row in tile for name in row),
            For(d, const(self.depth), seq(*step), kind, factor=self.unroll),
            *(
                Store(self.s, (const(r * self.kb + v * self.lanes),), Var(name, vdt))
                for r, row in enumerate(tile)
                for v, name in enumerate(row)
            ),
        ]

    def _row_softmax(self, keys: Split, r: Expr, t: Expr, index: tuple[Expr, ...]) -> list[Stmt]:
        """Tile row `r`'s logits in place (the item's row `t`, at `index`), then its running
        max and sum, and its `alpha`."""
        p, ctx, dtype = self.p, self.ctx, self.dtype
        jx, jp = ctx.fresh("j"), ctx.fresh("j")
        mb, new, base, total = (Var(ctx.fresh(n), dtype) for n in ("mb", "mn", "base", "ps"))
        score = Load(self.s, (self._flat(r, var(jx), self.kb),), dtype)
        logit = p.logit_at(index, _at(keys, var(jx)), score)
        logits = seq(
            Store(self.s, (self._flat(r, var(jx), self.kb),), logit),
            Assign(mb.name, Call("max", (mb, score), dtype)),
        )
        old, running = Load(self.m, (t,), dtype), Load(self.l, (t,), dtype)
        unset = Binary("==", new, identity("max", dtype), "bool")
        p_at = Load(self.s, (self._flat(r, var(jp), self.kb),), dtype)
        weights = seq(
            Store(self.s, (self._flat(r, var(jp), self.kb),), self.p.exp_at(p_at, base)),
            Assign(total.name, Binary("+", total, p_at, dtype)),
        )
        return [
            Decl(mb.name, dtype, init=identity("max", dtype)),
            self._keys(keys, jx, logits, ("max", mb.name)),
            Decl(new.name, dtype, init=Call("max", (old, mb), dtype)),
            Decl(base.name, dtype, init=Call("where", (unset, Const(0, dtype), new), dtype)),
            Store(self.alpha, (r,), self.p.exp_at(old, base)),
            Decl(total.name, dtype, init=Const(0, dtype)),
            self._keys(keys, jp, weights, ("sum", total.name)),
            Store(
                self.l, (t,), Call("fma", (running, Load(self.alpha, (r,), dtype), total), dtype)
            ),
            Store(self.m, (t,), new),
        ]

    def _accumulate(self, keys: Split, indices: list[tuple[Expr, ...]]) -> list[Stmt]:
        """The output rows of `indices` (the accumulators) rescaled by each row's `alpha`,
        then each key's weight times its value row added, in registers, and stored back."""
        ctx, vdt, n, dtype = self.ctx, self.vdt, self.width // self.lanes, self.dtype
        out = self.p.out.buffer
        tile = [[ctx.fresh(f"a{r}x{v}") for v in range(n)] for r in range(len(indices))]
        places = [[(*index, const(v * self.lanes)) for v in range(n)] for index in indices]
        start: list[Stmt] = []
        for r in range(len(indices)):
            alpha = Cast(vdt, Load(self.alpha, (const(r),), dtype))
            start += [
                Decl(name, vdt, init=Binary("*", Load(out, places[r][v], vdt), alpha, vdt))
                for v, name in enumerate(tile[r])
            ]
        j = ctx.fresh("j")
        row = substitute(self.p.values, self.p.places(indices[0], _at(keys, var(j))))
        vectors = vectorize(row, COL, self.lanes)
        assert vectors is not None, "`why_not` refuses value rows that are not contiguous"
        columns = [Var(ctx.fresh(f"v{v}"), vdt) for v in range(n)]
        step: list[Stmt] = [
            Decl(c.name, vdt, init=substitute(vectors, {COL: const(v * self.lanes)}))
            for v, c in enumerate(columns)
        ]
        for r, names in enumerate(tile):
            w = Var(ctx.fresh("w"), vdt)
            weight = Load(self.s, (add(const(r * self.kb), var(j)),), dtype)
            step.append(Decl(w.name, vdt, init=Cast(vdt, weight)))
            step += [
                Assign(name, Call("fma", (w, columns[v], Var(name, vdt)), vdt))
                for v, name in enumerate(names)
            ]
        return [
            *start,
            For(j, keys.inner_extent, seq(*step)),
            *(
                Store(out, places[r][v], Var(name, vdt))
                for r, names in enumerate(tile)
                for v, name in enumerate(names)
            ),
        ]

    def _finish(self, t: Expr, index: tuple[Expr, ...]) -> Stmt:
        out, dtype, c = self.p.out, self.dtype, self.ctx.fresh("c")
        at = dict(zip(out.axes, (*index, var(c)), strict=True))
        value = Binary(
            "/", Load(out.buffer, (*index, var(c)), dtype), Load(self.l, (t,), dtype), dtype
        )
        return self._vectorized(c, Store(out.buffer, (*index, var(c)), out.finish(value, at)))

    def _vectorized(self, c: str, body: Stmt) -> Stmt:
        """A vectorized loop over a value row."""
        return For(c, const(self.width), body, "vectorize", factor=self.lanes)

    def _keys(self, keys: Split, j: str, body: Stmt, reduction: tuple[str, str]) -> Stmt:
        """A vectorized loop over the block's keys, reducing into `reduction`."""
        return For(
            j, keys.inner_extent, body, "vectorize", factor=self.lanes, reduction=(reduction,)
        )

    def _flat(self, r: Expr, column: Expr, width: int) -> Expr:
        return add(mul(r, const(width)), column)


@dataclass(frozen=True)
class _Item:
    """One work item: its batch and head indices `outer`, and its `length` query rows from
    row `first` on."""

    outer: tuple[Expr, ...]
    first: Expr
    length: Expr

    def row(self, t: Expr) -> tuple[Expr, ...]:
        """The row indices of the item's row `t`."""
        return (*self.outer, add(self.first, t))


def _at(keys: Split, inner: Expr) -> Expr:
    """The key at `inner` of the current key block."""
    return add(mul(var(keys.outer), const(keys.tile)), inner)
