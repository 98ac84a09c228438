"""Stage analysis: which computes become loop nests, and what each of them computes.

Three passes over a `Program`:

1. **Inline** (prologue): an injective compute (no reduce) that is not an output is
   substituted into every read of it, its axes replaced by the reader's index expressions and
   its value cast to its dtype (a store rounds, so the inlined value must too). int4
   dequantization, `exp(x - max)` in softmax and the like thus cost no buffer.
2. **Anchors and epilogues**: every remaining compute (a reduction, or an injective output)
   anchors a stage. An injective output that reads an anchor exactly at its own axes (same
   shape, identity indices), where that anchor is read by nothing else and is not itself an
   output, is fused into the anchor's stage as an *epilogue* applied at store time
   (`matmul -> + bias -> relu -> cast`). Every other anchor that is not an output is
   materialized in a workspace buffer (softmax's row max and row sum).
3. **Classify** each stage: `injective`, `reduction`, or `contraction` (a sum whose body,
   under casts, is a product of two factors that read disjoint tensors and each depend on a
   spatial axis the other lacks: matmul, batched matmul, conv2d, dequantized matmul).

It also finds **row groups**: runs of consecutive stages that share leading "row" axes and
only read each other's results within the same row (softmax: row max, row sum, normalize),
which a schedule may compute row by row in one parallel loop.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from tunehub.compiler import dtypes, variance
from tunehub.compiler.ir import (
    Binary,
    Call,
    Cast,
    Compute,
    Expr,
    Extent,
    Load,
    Program,
    Var,
    loads,
    substitute,
    transform,
    walk,
)
from tunehub.compiler.products import ProductSides, split_product

INJECTIVE, REDUCTION, CONTRACTION = "injective", "reduction", "contraction"
KINDS = (INJECTIVE, REDUCTION, CONTRACTION)


@dataclass(frozen=True)
class Stage:
    """One loop nest: `anchor` (with injective producers inlined into its body) computed over
    its axes, then each `epilogue` compute applied to the value before it is stored into
    `buffer`. Epilogue bodies are written over the anchor's axis names."""

    index: int
    kind: str
    anchor: Compute
    epilogue: tuple[Compute, ...]
    buffer: str
    output: bool
    contraction: ProductSides | None = None
    # The output a reduction also stores each term in, at its row and reduce index, for the
    # stage computing that output to read back (`_kept_terms`); None: it keeps none.
    keeps: str | None = None
    # An attention stage's chain (`compiler.attention`): the consecutive stages it computes
    # in one pass, its own anchor, epilogue and buffer the last one's; () for any other.
    members: tuple[Stage, ...] = ()

    @property
    def axes(self) -> tuple[str, ...]:
        return self.anchor.axes

    @property
    def shape(self) -> tuple[Extent, ...]:
        return self.anchor.shape

    @property
    def dtype(self) -> str:
        """The dtype of the stored result (the last epilogue's, else the anchor's)."""
        return (self.epilogue[-1] if self.epilogue else self.anchor).dtype

    def body_at(self, index: dict[str, Expr]) -> Expr:
        """The anchor's body with its axes (and reduce axes) replaced by `index`."""
        return substitute(self.anchor.body, index)

    def finish(self, value: Expr, index: dict[str, Expr]) -> Expr:
        """What to store, given the anchor's value (in its compute dtype) at `index`: the
        value rounded to the anchor's dtype, then each epilogue applied to the previous
        result and rounded to its own dtype."""
        result: Expr = Cast(self.anchor.dtype, value)
        previous = self.anchor.name
        for compute in self.epilogue:
            body = replace_loads(substitute(compute.body, index), previous, result)
            result = Cast(compute.dtype, body)
            previous = compute.name
        return result

    def reads(self) -> list[Load]:
        """Every buffer read of the stage (anchor and epilogues), over the anchor's axes."""
        produced = {self.anchor.name, *(c.name for c in self.epilogue[:-1])}
        found = loads(self.anchor.body) + [ld for c in self.epilogue for ld in loads(c.body)]
        return [ld for ld in found if ld.tensor not in produced]


@dataclass(frozen=True)
class RowGroup:
    """Consecutive stages `first..last` (inclusive) whose first `rows` axes are the same rows
    and that read earlier stages of the group only within the current row."""

    first: int
    last: int
    rows: int

    @property
    def stages(self) -> range:
        return range(self.first, self.last + 1)


@dataclass(frozen=True)
class Analysis:
    program: Program
    stages: tuple[Stage, ...]
    groups: tuple[RowGroup, ...]
    # Each sum `variance.one_pass` made, to the compute of the program it computes (a variance).
    sums_for: Mapping[str, str] = field(default_factory=dict)
    # Each sum `variance.one_pass` turned into `S1 + n * K` (a mean), to that S1.
    means_from: Mapping[str, str] = field(default_factory=dict)

    @property
    def workspaces(self) -> tuple[Stage, ...]:
        """Stages whose result is materialized in a workspace (not an output)."""
        return tuple(s for s in self.stages if not s.output)


@functools.lru_cache(maxsize=256)
def analyze(program: Program, one_pass: bool = False, keep_terms: bool = False) -> Analysis:
    """The stages of `program`; with `one_pass`, variances as sums that need no mean
    (`variance.one_pass`); with `keep_terms`, costly terms computed once (`_kept_terms`)."""
    computes = _inline(program.computes, program.outputs)
    sums_for: dict[str, str] = {}
    means_from: dict[str, str] = {}
    if one_pass:
        names = {c.name for c in program.computes} | {t.name for t in program.inputs}
        names |= {s.name for s in program.symbols}
        computes = variance.one_pass(computes, names, sums_for, means_from)
        computes = _inline(computes, program.outputs)
    stages = _stages(program, computes)
    if keep_terms:
        stages = _kept_terms(stages)
    return Analysis(program, stages, _row_groups(stages), sums_for, means_from)


def _inline(computes: Sequence[Compute], outputs: Sequence[str]) -> list[Compute]:
    """`computes` with every injective non-output compute inlined into its readers (and
    dropped)."""
    inlined: dict[str, Compute] = {}
    kept: list[Compute] = []

    def expand(e: Expr) -> Expr | None:
        if isinstance(e, Load) and e.tensor in inlined:
            producer = inlined[e.tensor]
            mapping = dict(zip(producer.axes, e.indices, strict=True))
            return Cast(producer.dtype, substitute(producer.body, mapping))
        return None

    for compute in computes:
        compute = replace(compute, body=transform(compute.body, expand))
        if compute.reduce_op is None and compute.name not in outputs:
            inlined[compute.name] = compute
        else:
            kept.append(compute)
    return kept


def _stages(program: Program, computes: list[Compute]) -> tuple[Stage, ...]:
    readers = {c.name: [r.name for r in computes if _reads(r, c.name)] for c in computes}
    position = {c.name: n for n, c in enumerate(computes)}
    # anchor name -> its epilogue chain (computes over the anchor's axes)
    chains: dict[str, list[Compute]] = {}
    owner: dict[str, str] = {}  # compute name -> anchor name of its stage
    for compute in computes:
        target = _epilogue_target(program, compute, computes, chains, readers, position, owner)
        if target is None:
            chains[compute.name] = []
            owner[compute.name] = compute.name
        else:
            anchor = computes[position[target]]
            renamed: dict[str, Expr] = {
                axis: Var(a) for axis, a in zip(compute.axes, anchor.axes, strict=True)
            }
            chains[target].append(replace(compute, body=substitute(compute.body, renamed)))
            owner[compute.name] = target
    stages: list[Stage] = []
    for compute in computes:
        if compute.name not in chains:
            continue
        chain = tuple(chains[compute.name])
        buffer = (chain[-1] if chain else compute).name
        kind, contraction = classify(compute)
        stage = Stage(
            len(stages), kind, compute, chain, buffer, buffer in program.outputs, contraction
        )
        stages.append(stage)
    return tuple(stages)


def _epilogue_target(
    program: Program,
    compute: Compute,
    computes: list[Compute],
    chains: dict[str, list[Compute]],
    readers: dict[str, list[str]],
    position: dict[str, int],
    owner: dict[str, str],
) -> str | None:
    """The anchor whose stage `compute` can join as an epilogue, or None."""
    if compute.reduce_op is not None:
        return None
    identity = tuple(Var(a) for a in compute.axes)
    candidates = []
    for tail in {ld.tensor for ld in loads(compute.body)}:
        if tail not in owner:
            continue  # an input
        anchor = owner[tail]
        chain = chains[anchor]
        if (chain[-1].name if chain else anchor) != tail:
            continue
        if tail in program.outputs or readers[tail] != [compute.name]:
            continue
        if computes[position[tail]].shape != compute.shape:
            continue
        if any(ld.indices != identity for ld in loads(compute.body) if ld.tensor == tail):
            continue
        # Everything else it reads must exist before the anchor's stage runs.
        others = {owner[ld.tensor] for ld in loads(compute.body) if ld.tensor in owner} - {anchor}
        if any(position[o] > position[anchor] for o in others):
            continue
        candidates.append(anchor)
    return max(candidates, key=lambda a: position[a]) if candidates else None


def replace_loads(expr: Expr, tensor: str, value: Expr) -> Expr:
    """`expr` with every read of `tensor` replaced by `value`."""
    return transform(expr, lambda e: value if isinstance(e, Load) and e.tensor == tensor else None)


def _reads(compute: Compute, name: str) -> bool:
    return any(ld.tensor == name for ld in loads(compute.body))


# ----------------------------------------------------------------------------- classification


def classify(compute: Compute) -> tuple[str, ProductSides | None]:
    """The stage class of a (prologue-inlined) compute, with its product split if any."""
    if compute.reduce_op is None:
        return INJECTIVE, None
    if compute.reduce_op == "sum":
        split = split_product(compute)
        if split is not None:
            return CONTRACTION, split
    return REDUCTION, None


# ----------------------------------------------------------------------------- kept terms


# Functions a vector unit evaluates as a polynomial or a division: a term calling one is worth
# a store and a load to compute once (`_kept_terms`).
_COSTLY = frozenset(("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "pow"))


def _kept_terms(stages: tuple[Stage, ...]) -> tuple[Stage, ...]:
    """`stages` where a reduction's term is also computed by a later output, at the
    reduction's row with its reduce axes as the output's last axes (softmax: `exp(x - max)`
    in the row sum and in `Y`), and calls a costly function: the reduction stores each term
    into that output as it sums it, and the output's stage reads it back in place of
    computing it again: one `exp` per element instead of two (a softmax of 64 x 1000, its
    default config, 119 -> 65 us on an AVX2 EPYC, with `rows._most_chunks`). Only where the
    stored value is the term exactly: the output's dtype is the term's, a float that is not
    16-bit, with no epilogue after it."""
    result = list(stages)
    for r, reduction in enumerate(stages):
        if reduction.kind != REDUCTION:
            continue
        for y in range(r + 1, len(stages)):
            reader = _reading_back(reduction, result[y])
            if reader is not None and not any(s.keeps == reader.buffer for s in result):
                result[r] = replace(reduction, keeps=reader.buffer)
                result[y] = reader
                break
    return tuple(result)


def _reading_back(reduction: Stage, reader: Stage) -> Stage | None:
    """`reader` with `reduction`'s term, where its anchor computes it, read from its own
    output at the same point (see `_kept_terms`); else None."""
    anchor, out = reduction.anchor, reader.anchor
    if reader.kind != INJECTIVE or not reader.output or reader.epilogue:
        return None
    if out.dtype != anchor.term or not dtypes.is_float(out.dtype) or dtypes.is_half(out.dtype):
        return None
    if out.shape != (*anchor.shape, *(r.extent for r in anchor.reduce_axes)):
        return None
    names = [*anchor.axes, *(r.name for r in anchor.reduce_axes)]
    value = substitute(anchor.body, {a: Var(b) for a, b in zip(names, out.axes, strict=True)})
    costly = any(isinstance(e, Call) and e.fn in _COSTLY for e in walk(value))
    if value.dtype != out.dtype or not costly or value not in walk(out.body):
        return None
    mine = Load(out.name, tuple(Var(a) for a in out.axes), out.dtype)
    body = transform(out.body, lambda e: mine if e == value else None)
    return replace(reader, anchor=replace(out, body=body))


# ----------------------------------------------------------------------------- row groups


def _row_groups(stages: tuple[Stage, ...]) -> tuple[RowGroup, ...]:
    groups = []
    start = 0
    while start < len(stages):
        first = stages[start]
        rows = len(first.shape)
        end = start
        if first.kind != INJECTIVE and rows >= 1:
            while end + 1 < len(stages) and _joins(stages, start, end + 1, rows):
                end += 1
        if end > start:
            groups.append(RowGroup(start, end, rows))
        start = end + 1
    return tuple(groups)


def _joins(stages: tuple[Stage, ...], start: int, index: int, rows: int) -> bool:
    """Whether stage `index` can join the row group `start..index-1` of `rows` rows."""
    stage = stages[index]
    row_shape = stages[start].shape
    if stage.shape[:rows] != row_shape:
        return False
    if stage.kind != INJECTIVE and len(stage.shape) != rows:
        return False
    row_vars = tuple(Var(a) for a in stage.axes[:rows])
    earlier = {s.buffer for s in stages[start:index]}
    return all(ld.indices[:rows] == row_vars for ld in stage.reads() if ld.tensor in earlier)


# ----------------------------------------------------------------------------- queries


def contiguous(stage: Stage, axis: str) -> bool:
    """Whether every read that depends on `axis` walks memory with stride one along it (it
    appears only in the last index, as `axis` or `axis + c`)."""
    found = False
    for ld in stage.reads():
        uses = [_uses(index, axis) for index in ld.indices]
        if not any(uses):
            continue
        last = ld.indices[-1]
        if any(uses[:-1]) or not _unit_stride(last, axis):
            return False
        found = True
    return found


def _uses(expr: Expr, axis: str) -> bool:
    return any(isinstance(e, Var) and e.name == axis for e in walk(expr))


def _unit_stride(expr: Expr, axis: str) -> bool:
    if isinstance(expr, Var):
        return expr.name == axis
    if isinstance(expr, Binary) and expr.op in ("+", "-"):
        a, b = _uses(expr.a, axis), _uses(expr.b, axis)
        if a and not b:
            return _unit_stride(expr.a, axis)
        return expr.op == "+" and b and not a and _unit_stride(expr.b, axis)
    return False
