"""A GPU attention template: an attention chain (`compiler.attention`) in one pass over key
blocks with an online softmax, one thread per query row, no `[rows, keys]` buffer.

A block computes `threads` query rows of one batch and head index (grid x: query blocks,
grid y: batch and head indices, flattened). Each thread keeps its row's query side, running
max `m` and sum `l`, and accumulator row `acc[Ev]` in its own locals. Per block of `kb` keys,
the block's threads stage the keys' and values' sides in shared memory (zeros past the last
key), then each thread computes its row's `kb` scores and logits, takes `m' = max(m, mb)`,
rescales `l` and `acc` by `exp(m - m')` and adds each key's `p = exp(logit - m')` and
`p * v[key]`. A causal chain (`Pattern.causal`) stops at the block's last query. The SIMT
form: no tensor cores yet (CUDA's WMMA and wgmma templates are for single contractions).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

from tunehub.compiler import attention
from tunehub.compiler.analysis import Stage
from tunehub.compiler.attention import COL, DEPTH, Pattern
from tunehub.compiler.dtypes import INDEX, itemsize
from tunehub.compiler.ir import Binary, Call, Const, Expr, Load, Var, substitute
from tunehub.compiler.loop import (
    Assign,
    Barrier,
    Decl,
    For,
    If,
    Stmt,
    Store,
    add,
    as_expr,
    ceildiv,
    const,
    const_value,
    minimum,
    mul,
    product,
    seq,
    sub,
    var,
)
from tunehub.compiler.schedule.plan import Group
from tunehub.compiler.schedule.stage import Context, Schedule, identity, nest
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.gpu.limits import limits_for
from tunehub.targets.gpu.schedule.blocks import bind, less

THREADS = (32, 64, 128, 256)
KEY_BLOCKS = (16, 32, 64)
STATIC_SHARED = 48 * 1024  # bytes of shared memory a block declares without opting in


class SimtAttention(Schedule):
    kind = "simt_attention"
    summary = "attention in one pass over key blocks staged in shared memory, a row a thread"
    knob_docs: ClassVar[Mapping[str, str]] = {
        "threads": "query rows per block, one a thread",
        "kb": "keys per block staged in shared memory",
    }

    def why_not(self, stage: Stage, target: Target) -> str | None:
        found = attention.of(stage)
        depth = found.depth
        if not isinstance(stage.shape[-1], int) or not isinstance(depth, int):
            return "the head dimensions are not constants"
        return None

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        return {"threads": THREADS, "kb": KEY_BLOCKS}

    def naive(self, stage: Stage, target: Target) -> Config:
        return {"threads": THREADS[0], "kb": KEY_BLOCKS[0]}

    def default(self, stage: Stage, target: Target) -> Config:
        return {"threads": 64, "kb": 32}

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        found = attention.of(stage)
        depth = int(found.depth)
        shared = int(config["kb"]) * (depth + int(stage.shape[-1])) * itemsize(stage.dtype)
        if shared > min(STATIC_SHARED, limits_for(target).shared_bytes):
            return f"{shared} bytes of staged keys and values (at most {STATIC_SHARED})"
        heads = const_value(product([as_expr(e) for e in stage.shape[:-2]]))
        if heads is not None and heads > limits_for(target).grid_yz:
            return f"{heads} batch and head indices (grid y holds {limits_for(target).grid_yz})"
        return None

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        found = attention.of(stage)
        return _Lowering(found, config, ctx).kernel()


class _Lowering:
    """The kernel of one attention chain under one config (see the module doc)."""

    def __init__(self, found: Pattern, config: Config, ctx: Context) -> None:
        self.p, self.ctx = found, ctx
        self.threads, self.kb = int(config["threads"]), int(config["kb"])
        self.dtype = found.out.dtype
        self.width = int(found.out.shape[-1])
        self.depth = int(found.depth)
        self.keys = as_expr(found.scores.shape[-1])
        names = ("ks", "vs", "m", "l", "acc", "s", "qr")
        self.ks, self.vs, self.m, self.l, self.acc, self.s, self.qr = map(ctx.fresh, names)

    def kernel(self) -> Stmt:
        shape = self.p.maxes.shape
        queries = as_expr(shape[-1])
        bx = bind(self.ctx, "bq", ceildiv(queries, self.threads), "blockIdx.x")
        outer = Group(self.p.rows[:-1], tuple(as_expr(e) for e in shape[:-1]))
        by = bind(self.ctx, "bh", outer.extent, "blockIdx.y")
        heads = outer.index(var(by.var))
        self.outer = tuple(heads[r] for r in self.p.rows[:-1])
        self.first = mul(var(bx.var), const(self.threads))
        blocks = ceildiv(self.keys, self.kb)
        if self.p.causal:  # the keys up to the block's last query
            blocks = minimum(blocks, ceildiv(add(self.first, const(self.threads)), self.kb))
        ko = self.ctx.fresh("ko")
        dtype = self.dtype
        body = seq(
            Decl(self.ks, dtype, (self.kb * self.depth,), shared=True),
            Decl(self.vs, dtype, (self.kb * self.width,), shared=True),
            Decl(self.m, dtype),
            Decl(self.l, dtype),
            Decl(self.acc, dtype, (self.width,)),
            Decl(self.s, dtype, (self.kb,)),
            Decl(self.qr, dtype, (self.depth,)),
            self._per_row(self._start),
            For(ko, blocks, seq(*self._stage(var(ko)), Barrier(), self._per_row(
                lambda index: self._block(var(ko), index)), Barrier())),
            self._per_row(self._finish),
        )  # fmt: skip
        return nest([bx, by], body)

    def _per_row(self, each: Callable[[tuple[Expr, ...]], Stmt]) -> Stmt:
        """A thread binding over the block's rows, `each(index)` for a row that exists."""
        tx = self.ctx.fresh("tx")
        row = add(self.first, var(tx))
        queries = as_expr(self.p.maxes.shape[-1])
        body = If(less(row, queries), each((*self.outer, row)))
        return For(tx, const(self.threads), body, "threadIdx.x")

    def _start(self, index: tuple[Expr, ...]) -> Stmt:
        c, d = self.ctx.fresh("c"), self.ctx.fresh("d")
        at = {**self.p.places(index, const(0)), DEPTH: var(d)}
        zero = Const(0, self.dtype)
        return seq(
            Assign(self.m, identity("max", self.dtype)),
            Assign(self.l, zero),
            For(c, const(self.width), Store(self.acc, (var(c),), zero)),
            For(d, const(self.depth), Store(self.qr, (var(d),), substitute(self.p.query, at))),
        )

    def _stage(self, ko: Expr) -> list[Stmt]:
        """The key block's key and value sides into shared memory, by every thread."""
        index = (*self.outer, self.first)
        staged: list[Stmt] = []
        for buffer, side, width, axis in (
            (self.ks, self.p.keyed, self.depth, DEPTH),
            (self.vs, self.p.values, self.width, COL),
        ):
            tx, it, e = self.ctx.fresh("tx"), self.ctx.fresh("it"), self.ctx.fresh("e")
            size = self.kb * width
            flat = add(mul(var(it), const(self.threads)), var(tx))
            jj = Binary("//", var(e), const(width), INDEX)
            key = add(mul(ko, const(self.kb)), jj)
            at = {**self.p.places(index, key), axis: Binary("%", var(e), const(width), INDEX)}
            zero = Const(0, self.dtype)
            inside = less(key, self.keys)
            value = Call("where", (inside, substitute(side, at), zero), self.dtype)
            store = seq(Decl(e, INDEX, init=flat), Store(buffer, (var(e),), value))
            loop = For(it, ceildiv(const(size), self.threads), If(less(flat, const(size)), store))
            staged.append(For(tx, const(self.threads), loop, "threadIdx.x"))
        return staged

    def _block(self, ko: Expr, index: tuple[Expr, ...]) -> Stmt:
        """One row's scores, logits and softmax update against the staged key block."""
        p, ctx, dtype = self.p, self.ctx, self.dtype
        jj, d, dot = ctx.fresh("j"), ctx.fresh("d"), Var(ctx.fresh("dot"), dtype)
        key = add(mul(ko, const(self.kb)), var(jj))
        count = minimum(const(self.kb), sub(self.keys, mul(ko, const(self.kb))))
        at = dict(zip(p.scores.axes, (*index, key), strict=True))
        term = Binary(
            "*",
            Load(self.qr, (var(d),), dtype),
            Load(self.ks, (add(mul(var(jj), const(self.depth)), var(d)),), dtype),
            dtype,
        )
        mb, new, base, alpha, total = (
            Var(ctx.fresh(n), dtype) for n in ("mb", "mn", "base", "alpha", "ps")
        )
        score = p.logit_at(index, key, p.scores.finish(dot, at))
        m, s_j = Var(self.m, dtype), Load(self.s, (var(jj),), dtype)
        unset = Binary("==", new, identity("max", dtype), "bool")
        jp, jv, c = ctx.fresh("j"), ctx.fresh("j"), ctx.fresh("c")
        s_p, w = Load(self.s, (var(jp),), dtype), Load(self.s, (var(jv),), dtype)
        acc_c = Load(self.acc, (var(c),), dtype)
        v = Load(self.vs, (add(mul(var(jv), const(self.width)), var(c)),), dtype)
        return seq(
            Decl(mb.name, dtype, init=identity("max", dtype)),
            For(jj, count, seq(
                Decl(dot.name, dtype, init=Const(0, dtype)),
                For(d, const(self.depth), Assign(dot.name, Binary("+", dot, term, dtype))),
                Store(self.s, (var(jj),), score),
                Assign(mb.name, Call("max", (mb, s_j), dtype)),
            )),
            Decl(new.name, dtype, init=Call("max", (m, mb), dtype)),
            Decl(base.name, dtype, init=Call("where", (unset, Const(0, dtype), new), dtype)),
            Decl(alpha.name, dtype, init=p.exp_at(m, base)),
            Decl(total.name, dtype, init=Const(0, dtype)),
            For(jp, count, seq(Store(self.s, (var(jp),), p.exp_at(s_p, base)),
                               Assign(total.name, Binary("+", total, s_p, dtype)))),
            Assign(self.l, Call("fma", (Var(self.l, dtype), alpha, total), dtype)),
            Assign(self.m, new),
            For(c, const(self.width), Store(self.acc, (var(c),), Binary("*", acc_c, alpha, dtype))),
            For(jv, count, For(c, const(self.width),
                               Store(self.acc, (var(c),), Call("fma", (w, v, acc_c), dtype)))),
        )  # fmt: skip

    def _finish(self, index: tuple[Expr, ...]) -> Stmt:
        out, dtype, c = self.p.out, self.dtype, self.ctx.fresh("c")
        at = dict(zip(out.axes, (*index, var(c)), strict=True))
        value = Binary("/", Load(self.acc, (var(c),), dtype), Var(self.l, dtype), dtype)
        return For(c, const(self.width), Store(out.buffer, (*index, var(c)), out.finish(value, at)))
