"""The CPU's flash-attention template: an attention chain (`compiler.attention`) in one pass
over key blocks with an online softmax, no `[rows, keys]` buffer.

Every batch and head index and every block of `qb` query rows is one work item (`parallel`
outer loops collapsed into one OpenMP loop). Per item, each row keeps a running max `m`, a
running sum `l` and an accumulator row `acc[Ev]` in locals; per block of `kb` keys (which
the block's rows share while it is in cache), each row:

1. computes its `kb` scores (a dot product over the head dimension, vectorized, the key
   loop unrolled by `unroll`) into a local row, then the logits (scale, masks) in place,
   with their max `mb`, vectorized over the keys;
2. takes `m' = max(m, mb)`, rescales `l` and `acc` by `exp(m - m')` and adds
   `p = exp(logit - m')` (the chain's own term, kept in the local row) to `l`, and
   `p * v[key]` to `acc`, vectorized over `Ev`;

and the item ends with `out = acc / l` (the output's epilogue applied). A row whose logits
are all `-inf` so far subtracts 0 instead of `m'`, so that no `-inf - -inf` poisons the rows
that later keys make finite. `vec` is the simd length of every vectorized loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

from tunehub.compiler import attention
from tunehub.compiler.analysis import Stage, replace_loads
from tunehub.compiler.attention import COL, KEY, Pattern
from tunehub.compiler.ir import Binary, Call, Const, Expr, Load, Var, substitute, transform
from tunehub.compiler.loop import (
    Assign,
    Decl,
    For,
    Stmt,
    Store,
    add,
    as_expr,
    const,
    mul,
    seq,
    var,
)
from tunehub.compiler.schedule.stage import (
    Context,
    Loop,
    Schedule,
    Split,
    identity,
    nest,
    split,
    term,
)
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.cpu.isa import vector_widths
from tunehub.targets.cpu.schedule.injective import MAX_COLLAPSE

# The statements of one query row `r` of a work item, given the row's index expressions.
PerRow = Callable[[Expr, tuple[Expr, ...]], Stmt]

QUERY_BLOCKS = (1, 2, 4, 8)
KEY_BLOCKS = (16, 32, 64, 128, 256)
UNROLLS = (1, 2, 4)
MAX_ROW = 1024  # the widest value row (`Ev`) an accumulator row in locals holds


class FlashAttention(Schedule):
    kind = "flash"
    summary = "attention in one pass over key blocks with an online softmax (flash attention)"
    knob_docs: ClassVar[Mapping[str, str]] = {
        "qb": "query rows per work item, sharing each key block while it is in cache",
        "kb": "keys per block: the scores each row keeps in locals",
        "vec": "vector lanes of the dot products, the key loops and the value rows",
        "unroll": "keys whose dot products are computed together",
        "parallel": "outer loops (batch, heads, query blocks) collapsed into one parallel loop",
    }

    def why_not(self, stage: Stage, target: Target) -> str | None:
        width = stage.shape[-1]
        if not isinstance(width, int) or width > MAX_ROW:
            return f"the value rows are not a constant of at most {MAX_ROW}"
        return None

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        outer = len(stage.shape) - 1  # batch and head axes, and the query blocks
        return {
            "qb": QUERY_BLOCKS,
            "kb": KEY_BLOCKS,
            "vec": vector_widths(target, stage.dtype),
            "unroll": UNROLLS,
            "parallel": tuple(range(min(MAX_COLLAPSE, outer) + 1)),
        }

    def naive(self, stage: Stage, target: Target) -> Config:
        return {name: values[0] for name, values in self.knobs(stage, target).items()}

    def default(self, stage: Stage, target: Target) -> Config:
        knobs = self.knobs(stage, target)
        return {
            "qb": 4,
            "kb": 64,
            "vec": knobs["vec"][-1],
            "unroll": 1,
            "parallel": knobs["parallel"][-1],
        }

    def seeds(self, stage: Stage, target: Target, symbols: Mapping[str, int]) -> list[Config]:
        default = self.default(stage, target)
        return [default, {**default, "qb": 8, "kb": 128}, {**default, "qb": 2, "kb": 32}]

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        found = attention.pattern(stage.members)
        assert found is not None, "an attention stage is a chain `attention.chains` found"
        return _Lowering(found, config, ctx).item()


class _Lowering:
    """The loop nest of one attention chain under one config (see the module doc)."""

    def __init__(self, found: Pattern, config: Config, ctx: Context) -> None:
        self.p, self.ctx = found, ctx
        self.qb, self.kb = int(config["qb"]), int(config["kb"])
        self.vec, self.unroll = int(config["vec"]), int(config["unroll"])
        self.parallel = int(config["parallel"])
        self.dtype = found.out.dtype
        self.width = int(found.out.shape[-1])
        names = ("m", "l", "acc", "s")
        self.m, self.l, self.acc, self.s = (ctx.fresh(n) for n in names)

    def item(self) -> Stmt:
        """The outer loops over batch, heads and query blocks around one work item."""
        shape = self.p.maxes.shape
        loops = [Loop(self.ctx.fresh("b"), as_expr(e)) for e in shape[:-1]]
        query = split(self.ctx, "q", as_expr(shape[-1]), self.qb)
        loops.append(Loop(query.outer, query.outer_extent))
        loops = [
            Loop(lp.var, lp.extent, "parallel") if n < self.parallel else lp
            for n, lp in enumerate(loops)
        ]
        outer = tuple(var(lp.var) for lp in loops[:-1])
        keys = split(self.ctx, "k", as_expr(self.p.scores.shape[-1]), self.kb)
        acc_dtype = self.dtype
        body = seq(
            Decl(self.m, acc_dtype, (self.qb,)),
            Decl(self.l, acc_dtype, (self.qb,)),
            Decl(self.acc, acc_dtype, (self.qb, self.width)),
            Decl(self.s, acc_dtype, (self.qb, self.kb)),
            self._rows(query, outer, self._start),
            For(keys.outer, keys.outer_extent, self._rows(query, outer, self._block(keys))),
            self._rows(query, outer, self._finish),
        )
        return nest(loops, body)

    def _rows(self, query: Split, outer: tuple[Expr, ...], each: PerRow) -> Stmt:
        """A loop over the item's query rows, `each(r, index)` per row."""
        r = self.ctx.fresh("r")
        row = substitute(query.index, {query.inner: var(r)})
        extent = substitute(query.inner_extent, {query.inner: var(r)})
        return For(r, extent, each(var(r), (*outer, row)))

    def _start(self, r: Expr, index: tuple[Expr, ...]) -> Stmt:
        lowest = identity("max", self.dtype)
        c = self.ctx.fresh("c")
        return seq(
            Store(self.m, (r,), lowest),
            Store(self.l, (r,), Const(0, self.dtype)),
            self._cols(c, Store(self.acc, (r, var(c)), Const(0, self.dtype))),
        )

    def _cols(self, c: str, body: Stmt) -> Stmt:
        return For(c, const(self.width), body, "vectorize", factor=self.vec)

    def _block(self, keys: Split) -> PerRow:
        def each(r: Expr, index: tuple[Expr, ...]) -> Stmt:
            mb = self.ctx.fresh("mb")
            return seq(*self._scores(keys, r, index, mb), *self._softmax(keys, r, index, mb))

        return each

    def _scores(self, keys: Split, r: Expr, index: tuple[Expr, ...], mb: str) -> list[Stmt]:
        """The block's scores of row `r`, then its logits in place and their max `mb`."""
        p, ctx = self.p, self.ctx
        jj, d, dot = ctx.fresh("j"), ctx.fresh("d"), ctx.fresh("dot")
        at = dict(zip(p.scores.axes, (*index, _at(keys, var(jj))), strict=True))
        depth = p.scores.anchor.reduce_axes[0]
        term_at = term(p.scores, {**at, depth.name: var(d)})
        dot_var = Var(dot, self.dtype)
        dots = seq(
            Decl(dot, self.dtype, init=Const(0, self.dtype)),
            For(
                d,
                as_expr(depth.extent),
                Assign(dot, Binary("+", dot_var, term_at, self.dtype)),
                "vectorize",
                factor=self.vec,
                reduction=(("sum", dot),),
            ),
            Store(self.s, (r, var(jj)), p.scores.finish(dot_var, at)),
        )
        unrolled = For(
            jj,
            keys.inner_extent,
            dots,
            "unroll" if self.unroll > 1 else "serial",
            factor=self.unroll,
        )
        jx = ctx.fresh("j")
        mapping = self._places(index, _at(keys, var(jx)))
        score = Load(self.s, (r, var(jx)), self.dtype)
        logit = replace_loads(substitute(p.logit, mapping), p.scores.buffer, score)
        mb_var = Var(mb, self.dtype)
        logits = seq(
            Store(self.s, (r, var(jx)), logit),
            Assign(mb, Call("max", (mb_var, score), self.dtype)),
        )
        return [
            unrolled,
            Decl(mb, self.dtype, init=identity("max", self.dtype)),
            self._keys(keys, jx, logits, ("max", mb)),
        ]

    def _softmax(self, keys: Split, r: Expr, index: tuple[Expr, ...], mb: str) -> list[Stmt]:
        """Row `r`'s running max, sum and accumulator updated with the block's logits, whose
        max is `mb`."""
        ctx, dtype = self.ctx, self.dtype
        new, base, alpha, total = (Var(ctx.fresh(n), dtype) for n in ("mn", "base", "alpha", "ps"))
        old, running = Load(self.m, (r,), dtype), Load(self.l, (r,), dtype)
        unset = Binary("==", new, identity("max", dtype), "bool")
        j = ctx.fresh("j")
        p_at = Load(self.s, (r, var(j)), dtype)
        weights = seq(
            Store(self.s, (r, var(j)), self._exp(p_at, base)),
            Assign(total.name, Binary("+", total, p_at, dtype)),
        )
        return [
            Decl(new.name, dtype, init=Call("max", (old, Var(mb, dtype)), dtype)),
            Decl(base.name, dtype, init=Call("where", (unset, Const(0, dtype), new), dtype)),
            Decl(alpha.name, dtype, init=self._exp(old, base)),
            Decl(total.name, dtype, init=Const(0, dtype)),
            self._keys(keys, j, weights, ("sum", total.name)),
            Store(self.l, (r,), Call("fma", (running, alpha, total), dtype)),
            Store(self.m, (r,), new),
            *self._accumulate(keys, r, index, alpha),
        ]

    def _accumulate(self, keys: Split, r: Expr, index: tuple[Expr, ...], alpha: Expr) -> list[Stmt]:
        """Row `r`'s accumulator rescaled by `alpha`, then each key's weight times its value
        row added, vectorized over the row."""
        ctx, dtype = self.ctx, self.dtype
        c, cv, j, w = ctx.fresh("c"), ctx.fresh("c"), ctx.fresh("j"), Var(ctx.fresh("w"), dtype)
        values = substitute(self.p.values, self._places(index, _at(keys, var(j)), var(cv)))
        acc, acc_v = Load(self.acc, (r, var(c)), dtype), Load(self.acc, (r, var(cv)), dtype)
        add_row = Store(self.acc, (r, var(cv)), Call("fma", (w, values, acc_v), dtype))
        return [
            self._cols(c, Store(self.acc, (r, var(c)), Binary("*", acc, alpha, dtype))),
            For(
                j,
                keys.inner_extent,
                seq(
                    Decl(w.name, dtype, init=Load(self.s, (r, var(j)), dtype)),
                    self._cols(cv, add_row),
                ),
            ),
        ]

    def _finish(self, r: Expr, index: tuple[Expr, ...]) -> Stmt:
        out, dtype, c = self.p.out, self.dtype, self.ctx.fresh("c")
        value = Binary("/", Load(self.acc, (r, var(c)), dtype), Load(self.l, (r,), dtype), dtype)
        at = dict(zip(out.axes, (*index, var(c)), strict=True))
        return self._cols(c, Store(out.buffer, tuple(at.values()), out.finish(value, at)))

    def _keys(self, keys: Split, j: str, body: Stmt, reduction: tuple[str, str]) -> Stmt:
        return For(j, keys.inner_extent, body, "vectorize", factor=self.vec, reduction=(reduction,))

    def _places(self, index: tuple[Expr, ...], key: Expr, col: Expr | None = None) -> dict:
        mapping: dict[str, Expr] = dict(zip(self.p.rows, index, strict=True))
        mapping[KEY] = key
        if col is not None:
            mapping[COL] = col
        return mapping

    def _exp(self, x: Expr, m: Expr) -> Expr:
        """The chain's own `exp(logit - max)` at logit `x` and max `m`."""
        logit, maxes = self.p.logit, self.p.maxes.buffer
        return transform(
            self.p.exp,
            lambda e: (
                x if e == logit else (m if isinstance(e, Load) and e.tensor == maxes else None)
            ),
        )


def _at(keys: Split, inner: Expr) -> Expr:
    """The key at `inner` of the current key block."""
    return add(mul(var(keys.outer), const(keys.tile)), inner)
