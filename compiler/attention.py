"""Attention chains: four stages that one pass over the keys with an online softmax computes.

The eager form of attention (`frontends.attention`, or a model's own `matmul`, scale, mask,
`softmax`, `matmul`) becomes, after inlining, four consecutive stages:

1. `scores`: a sum over `[rows..., key]` (rows: every batch, head and query axis) of a
   product of query factors and key factors (a contraction, or, where q and k are views of
   one tensor, a reduction by class);
2. `max`: the max over `key` of a *logit*, any elementwise expression of `scores[rows, key]`,
   the indices and other tensors (scale, boolean or additive masks, causal conditions);
3. `sum`: the sum over `key` of `exp(logit - max[rows])`;
4. `out`: a contraction over `key` of `exp(logit - max[rows]) / sum[rows]` times a value
   side of its own (`v[..., key, col]` read through any view: grouped heads, transposes).

Only the first three are workspaces, read by nothing else. `chains` finds them and makes
each one `ATTENTION` stage whose `members` are the four (the output, its dtype and epilogue
those of `out`); `pattern` says what each part is, over placeholder axis names (`ROWS`,
`KEY`, `COL`), for a template to index. Because the sum's term is `exp(x - m)`, a running
max `m` rescales what was summed so far by `exp(m_old - m_new)`: the flash-attention
recurrence, with no `[rows, key]` buffer. Only floats that are their own compute dtype
(float32, float64): a 16-bit chain rounds its scores and weights, which one pass would not.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tunehub.compiler import dtypes
from tunehub.compiler.analysis import Analysis, Stage, replace_loads
from tunehub.compiler.ir import (
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Extent,
    Load,
    Var,
    loads,
    substitute,
    transform,
    walk,
)
from tunehub.compiler.products import factors, keeps_values, product_under_casts

ATTENTION = "attention"
KEY, COL, DEPTH = "@key", "@col", "@depth"
_LENGTH = 4


def rows(count: int) -> tuple[str, ...]:
    """The placeholder names of `count` row axes."""
    return tuple(f"@r{n}" for n in range(count))


@dataclass(frozen=True)
class Pattern:
    """An attention chain's parts, over the placeholders `rows(len(row_shape))`, `KEY` and
    `COL` (and `DEPTH`, the scores' own reduce axis)."""

    scores: Stage
    maxes: Stage
    sums: Stage
    out: Stage
    query: Expr  # the scores' factors read at (rows, DEPTH), not at KEY
    keyed: Expr  # the scores' factors read at (rows, KEY, DEPTH), not at the query row
    logit: Expr  # reads `scores.buffer` at (rows, KEY)
    exp: Expr  # `exp(logit - max)` as the sum writes it, `max` a read of `maxes.buffer`
    values: Expr  # the value side of the output's product, at (rows, KEY, COL), not at the
    # query row

    @property
    def rows(self) -> tuple[str, ...]:
        return rows(len(self.maxes.shape))

    @property
    def depth(self) -> Extent:
        """The extent the scores sum over: the query and key rows' width."""
        return self.scores.anchor.reduce_axes[0].extent

    def places(self, index: tuple[Expr, ...], key: Expr) -> dict[str, Expr]:
        """The placeholders at row `index` and `key` (`COL` and `DEPTH` stay themselves)."""
        return {**dict(zip(self.rows, index, strict=True)), KEY: key}

    def logit_at(self, index: tuple[Expr, ...], key: Expr, score: Expr) -> Expr:
        """The logit at row `index` and `key`, given its `score`."""
        return replace_loads(
            substitute(self.logit, self.places(index, key)), self.scores.buffer, score
        )

    def exp_at(self, x: Expr, m: Expr) -> Expr:
        """The chain's own `exp(logit - max)` at logit `x` and max `m`."""

        def at(e: Expr) -> Expr | None:
            if e == self.logit:
                return x
            return m if isinstance(e, Load) and e.tensor == self.maxes.buffer else None

        return transform(self.exp, at)

    @property
    def causal(self) -> bool:
        """Whether the logit is `where(key <= query, x, c)`, `c` the dtype's lowest finite
        value or `-inf` and `x` the scores under constants only: a key past a row's query
        then adds exactly nothing (`exp(c - m)` is 0 once the row has seen key 0, which every
        row has), so a kernel may skip the keys past a block's last query."""
        logit = _unwrap(self.logit)
        if not (isinstance(logit, Call) and logit.fn == "where"):
            return False
        cond, x, c = logit.args
        before = Binary("<=", Var(KEY), Var(self.rows[-1]), cond.dtype)
        lowest = float(np.finfo(dtypes.to_numpy(self.maxes.dtype)).min)
        if cond != before or not isinstance(c, Const) or float(c.value) > lowest:
            return False
        reads = {ld.tensor for ld in loads(x)}
        calls = [e for e in walk(x) if isinstance(e, Call)]
        return reads == {self.scores.buffer} and not calls


def chains(analysis: Analysis) -> tuple[Stage, ...]:
    """An `ATTENTION` stage for every attention chain among the analysis's stages."""
    stages = analysis.stages
    found = []
    for first in range(len(stages) - _LENGTH + 1):
        members = stages[first : first + _LENGTH]
        inside = {s.buffer for s in members[:-1]}
        outside = [s for s in stages if s not in members]
        if any(ld.tensor in inside for s in outside for ld in s.reads()):
            continue
        if pattern(members) is not None:
            out = members[-1]
            found.append(
                Stage(
                    out.index,
                    ATTENTION,
                    out.anchor,
                    out.epilogue,
                    out.buffer,
                    out.output,
                    members=members,
                )
            )
    return tuple(found)


def of(stage: Stage) -> Pattern:
    """The pattern of an attention stage (one `chains` made)."""
    found = pattern(stage.members)
    assert found is not None, "an attention stage is a chain `chains` found"
    return found


@functools.lru_cache(maxsize=64)
def pattern(members: tuple[Stage, ...]) -> Pattern | None:
    """The parts of the chain `members` (scores, max, sum, out), or None where they are not
    one (see the module doc)."""
    if len(members) != _LENGTH or not all(map(_exact_float, members)):
        return None
    scores, maxes, sums, out = members
    ops = tuple(s.anchor.reduce_op for s in members)
    if ops != ("sum", "max", "sum", "sum") or len(scores.anchor.reduce_axes) != 1:
        return None
    if scores.output or maxes.output or sums.output or maxes.epilogue or sums.epilogue:
        return None
    keys = scores.shape[-1]
    if maxes.shape != scores.shape[:-1] or sums.shape != maxes.shape:
        return None
    if out.shape[:-1] != maxes.shape or any(
        len(s.anchor.reduce_axes) != 1 or s.anchor.reduce_axes[0].extent != keys
        for s in (maxes, sums, out)
    ):
        return None
    names = rows(len(maxes.shape))
    at = tuple(Var(r) for r in names)
    logit = _over(maxes, (*names, KEY))
    if any(ld.indices != (*at, Var(KEY)) for ld in loads(logit) if ld.tensor == scores.buffer):
        return None
    exp = _over(sums, (*names, KEY))
    if _exp_minus(exp) != (logit, Load(maxes.buffer, at, maxes.dtype)):
        return None
    weights: Expr | None = None
    value_side: list[Expr] = []
    for factor in factors(product_under_casts(_over(out, (*names, COL, KEY)))):
        if _unwrap(factor) == Binary("/", exp, Load(sums.buffer, at, sums.dtype), exp.dtype):
            weights = factor
        else:
            value_side.append(factor)
    inside = {scores.buffer, maxes.buffer, sums.buffer}
    if weights is None or not value_side:
        return None
    if any(ld.tensor in inside for f in value_side for ld in loads(f)):
        return None
    values = _product(value_side, out)
    sides = _sides(scores, (*names, KEY, DEPTH))
    if sides is None or _reads(values, names[-1]):
        return None
    return Pattern(scores, maxes, sums, out, *sides, logit, exp, values)


def _sides(scores: Stage, names: tuple[str, ...]) -> tuple[Expr, Expr] | None:
    """The scores' product as its factors that read the query row but no key, and those that
    read a key but not the query row (constants on the query's side)."""
    query: list[Expr] = []
    keyed: list[Expr] = []
    for factor in factors(product_under_casts(_over(scores, names))):
        if _reads(factor, KEY):
            if _reads(factor, names[-3]):
                return None
            keyed.append(factor)
        else:
            query.append(factor)
    if not query or not keyed:
        return None
    return _product(query, scores), _product(keyed, scores)


def _product(parts: list[Expr], stage: Stage) -> Expr:
    value = parts[0]
    for factor in parts[1:]:
        value = Binary("*", value, factor, stage.anchor.term or stage.anchor.dtype)
    return value


def _reads(expr: Expr, axis: str) -> bool:
    return any(isinstance(e, Var) and e.name == axis for e in walk(expr))


def _over(stage: Stage, names: tuple[str, ...]) -> Expr:
    """`stage`'s anchor body with its axes then its reduce axis named `names`."""
    axes = (*stage.axes, stage.anchor.reduce_axes[0].name)
    return substitute(stage.anchor.body, {a: Var(n) for a, n in zip(axes, names, strict=True)})


def _unwrap(expr: Expr) -> Expr:
    while isinstance(expr, Cast) and keeps_values(expr):
        expr = expr.x
    return expr


def _exp_minus(expr: Expr) -> tuple[Expr, Expr] | None:
    """`(x, m)` where `expr` is `exp(x - m)`."""
    expr = _unwrap(expr)
    if isinstance(expr, Call) and expr.fn == "exp":
        inner = _unwrap(expr.args[0])
        if isinstance(inner, Binary) and inner.op == "-":
            return inner.a, _unwrap(inner.b)
    return None


def _exact_float(stage: Stage) -> bool:
    """Whether every value the stage stores or sums is a float that is its compute dtype."""
    kinds = [stage.anchor.dtype, *(c.dtype for c in stage.epilogue)]
    kinds += [stage.anchor.term] if stage.anchor.term else []
    return stage.keeps is None and all(
        dtypes.is_float(d) and not dtypes.is_half(d) and dtypes.compute_dtype(d) == d for d in kinds
    )
