"""Group a graph's ops into kernels as a fusing compiler would, and write each group as a
task signature whose computes are its ops' computes, in order.

Two kinds of op are no kernel of their own:

- a **view** (a reshape, transpose, broadcast, copy or slice: `ops.VIEW`) is read through:
  every op that reads it reads its input at the view's indexing, so chains of views cost
  nothing and a group's inputs are the tensors its views view. A view the model returns, or
  an op left out reads, stays a view of what its group writes (a runtime keeps it a view);
- a **constant**, a value computed from weights, literals and shapes alone (a causal mask,
  position ids, RoPE's tables), is *folded*: computed once when the model is loaded, then
  read by the kernels as an input, like a weight. The exception is what a contraction takes
  as its prologue (an int4 weight's unpacking and dequantization): reading the packed
  weight, not a decoded copy, is the point of that kernel.

The groups follow the usual rules (TVM's FuseOps, XLA's fusion, Inductor's), in this order:

1. a contraction (matmul, gemm, linear, conv2d, MatMulNBits) takes its prologue, the casts
   of its inputs and whatever is computed from weights alone, and its elementwise epilogue
   (bias, activation, residual add, cast);
2. a row op (softmax, layer norm, rms norm, a reduction) takes the elementwise ops before
   it and after it, and further reductions over the same rows, so that a norm written as
   pow/mean/add/sqrt/div/mul, or a layer norm written as two means, is one kernel;
3. the elementwise ops left form chains (a GELU written as div/erf/add/mul/mul is one).

An op joins a group only if the group stays convex (no path leaves it and comes back: the
kernels must run in some order) and within a signature's limits (32 inputs, 32 computes, 8
outputs). A group's inputs are the values it reads and does not compute; its outputs, the
values it computes that another group or the model reads. The signatures keep the model's
arithmetic as written: normalizing forms is the compiler's work, not the frontend's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field

import numpy as np
from pydantic import ValidationError

from tunehub.frontends.computes import Call, Indexing, Operand, Unsupported
from tunehub.frontends.computes import number as literal_text
from tunehub.frontends.errors import reason
from tunehub.frontends.graph import Graph, Op
from tunehub.frontends.names import Names, identifier
from tunehub.frontends.ops import CONTRACTION, INJECTIVE, KINDS, ROW, VIEW
from tunehub.frontends.taskset import (
    Binding,
    Found,
    Skipped,
    Source,
    elements,
    flops_at,
    signature_flops,
)
from tunehub.schemas.signature import ComputeDecl, TaskSignature, TensorDecl

MAX_INPUTS, MAX_COMPUTES, MAX_OUTPUTS = 32, 32, 8
_SINK = -1  # the post-dominator of an op whose value leaves the mapped ops
# Why an op is no kernel of its own (`Extraction.no_kernel`).
A_VIEW = "a view: the kernels that read it read its input"
FOLDED = "computed once from constants and shapes, when the model is loaded"


@dataclass(frozen=True)
class Extraction:
    """What a graph's ops become: tasks (`found`, one per group), ops left out (`skipped`),
    ops that need no kernel of their own (`no_kernel`: views and folded constants, with the
    reason), and the values `folded` (computed once from constants and shapes), which a
    runtime computes when it loads the model."""

    found: list[Found]
    skipped: list[Skipped]
    no_kernel: list[Skipped]
    folded: set[str]


def extract(graph: Graph) -> Extraction:
    """The graph's tasks, one per group, its ops left out (those already skipped and those no
    kind could write as computes) and the ops that need no kernel."""
    at = flops_at(graph.symbols)
    skipped = list(graph.skipped)
    no_kernel = list(graph.folded)
    views = _Views(graph)
    read_outside = {*graph.outputs, *graph.skipped_reads}  # values a kernel must write
    mappable: list[Op] = []
    flops: dict[str, int] = {}
    counts: dict[str, int] = {}
    for op in graph.ops:
        try:
            if KINDS[op.kind].fusion == VIEW:
                views.add(op)
                no_kernel.append(Skipped(op.name, op.op_type, A_VIEW, 0))
                continue
            computes = _emit(graph, views, op, Names(), {})
        except (Unsupported, ValidationError) as exc:
            elems = elements(graph.values[op.output].shape, at)
            skipped.append(Skipped(op.name, op.op_type, reason(exc), elems))
            read_outside.update(v for v in op.inputs if v is not None)
            continue
        flops[op.name], counts[op.name] = signature_flops(computes, at), len(computes)
        mappable.append(op)
    constant = _constants(graph, [*mappable, *views.ops.values()])
    fused = _Fusion(graph, mappable, counts, read_outside, views, constant)
    found = []
    for group in fused.groups():
        sources = [Source(op.name, op.op_type, flops[op.name]) for op in group]
        outputs = fused.outputs(group)
        try:
            signature, inputs = _signature(graph, views, group, outputs)
        except (Unsupported, ValidationError) as exc:
            why = f"its group cannot be written as a signature: {reason(exc)}"
            skipped += [Skipped(s.name, s.op_type, why, s.flops) for s in sources]
            continue
        computed = tuple(op.output for op in group)
        read = views.read_through(v for op in group for v in op.inputs if v is not None)
        binding = Binding(inputs, tuple(outputs), computed, read)
        found.append(Found(signature, sources, binding=binding))
    folded = fused.folded()
    no_kernel += [Skipped(op.name, op.op_type, FOLDED, flops[op.name]) for op in folded]
    values = {op.output for op in folded} | {f.name for f in graph.folded}
    return Extraction(found, skipped, no_kernel, values)


def fold(graph: Graph, folded: set[str], values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The `folded` values the graph's ops compute (an `Extraction`'s), from `values` (its
    weights and the frontend's own folded constants): what a runtime computes once, when it
    loads the model, here with the reference evaluator (they are per-channel vectors, masks
    and tables, not the model's work)."""
    from tunehub.compiler.program import load
    from tunehub.compiler.reference import evaluate

    views, known = _Views(graph), dict[str, np.ndarray]()
    for op in graph.ops:
        if KINDS[op.kind].fusion == VIEW:
            with suppress(Unsupported):
                views.add(op)
    for op in graph.ops:
        if op.output not in folded or op.output in views.ops:
            continue
        signature, inputs = _signature(graph, views, [op], [op.output])
        program = load(signature)
        arrays = {
            decl.name: np.asarray(known[value] if value in known else values[value]).reshape(
                program.shape_of(decl.name, {})
            )
            for decl, value in zip(program.inputs, inputs, strict=True)
        }
        (known[op.output],) = evaluate(program, arrays, {}).values()
    return {value: known[value] for value in folded if value in known}


def _constants(graph: Graph, ops: Sequence[Op]) -> set[str]:
    """The values computed from weights, literals and shapes alone (the frontend's constant
    values, and what `ops`, in graph order, compute from them)."""
    constant = {name for name, value in graph.values.items() if value.constant}
    mapped = {op.output for op in ops}
    for op in graph.ops:
        if op.output in mapped and all(v is None or v in constant for v in op.inputs):
            constant.add(op.output)
    return constant


class _Views:
    """The graph's views: what each views, through which indexing."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.ops: dict[str, Op] = {}
        self._indexing: dict[str, Indexing] = {}

    def add(self, op: Op) -> None:
        """Take `op` (a view kind's), its indexing made now: Unsupported if it has none."""
        source = op.inputs[0]
        if source is None:
            raise Unsupported("a view of nothing")
        shapes = self.graph.values[source].shape, self.graph.values[op.output].shape
        view = KINDS[op.kind].view
        assert view is not None  # a view kind's
        self._indexing[op.output] = view(*shapes, op.attrs)
        self.ops[op.output] = op

    def root(self, value: str) -> str:
        """The value a chain of views from `value` views (`value` itself if it is no view)."""
        while value in self.ops:
            value = self._source(value)
        return value

    def resolve(self, value: str) -> tuple[str, Indexing | None]:
        """The value `value` views, and the indexing `value` reads it through (None: none)."""
        chain = []
        while value in self.ops:
            chain.append(self._indexing[value])
            value = self._source(value)
        if not chain:
            return value, None

        def indexing(point: Sequence[str]) -> Sequence[str]:
            for step in chain:
                point = step(point)
            return point

        return value, indexing

    def read_through(self, values: Iterable[str]) -> tuple[str, ...]:
        """The views on the way from `values` to what they view, each once, in graph order."""
        found: set[str] = set()
        for value in values:
            while value in self.ops and value not in found:
                found.add(value)
                value = self._source(value)
        return tuple(v for v in self.ops if v in found)

    def _source(self, value: str) -> str:
        source = self.ops[value].inputs[0]
        assert source is not None  # checked in `add`
        return source


@dataclass
class _Fusion:
    """The grouping of one graph's mappable ops (in topological order)."""

    graph: Graph
    ops: list[Op]  # no views: an op reads what a view views (`_reads`)
    computes: dict[str, int]  # per op (by name): how many computes it writes
    read_outside: set[str]  # values the model returns or an op left out reads
    views: _Views
    constant: set[str]  # values computed from weights, literals and shapes alone
    group_of: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.read_outside = {self.views.root(v) for v in self.read_outside}
        self.position = {op.name: n for n, op in enumerate(self.ops)}
        self.producer = {op.output: n for n, op in enumerate(self.ops)}
        self.consumers: dict[str, list[int]] = {}
        for n in range(len(self.ops)):
            for value in self._reads(n):
                self.consumers.setdefault(value, []).append(n)
        # Ancestors and descendants of each op as bit sets, for the convexity test.
        self.ancestors = [0] * len(self.ops)
        for n in range(len(self.ops)):
            for p in self._producers(n):
                self.ancestors[n] |= self.ancestors[p] | 1 << p
        self.descendants = [0] * len(self.ops)
        for n in reversed(range(len(self.ops))):
            for c in self._users(n):
                self.descendants[n] |= self.descendants[c] | 1 << c
        # Each op's immediate post-dominator: the first op every path from it goes through
        # (_SINK when a path leaves the mapped ops: the model's outputs, an op left out).
        self.post: list[int] = [_SINK] * len(self.ops)
        self.depth = {_SINK: 0}
        for n in reversed(range(len(self.ops))):
            users = self._users(n)
            meet = _SINK if not users or self._outside(self.ops[n].output) else users[0]
            for user in users[1:]:
                meet = self._meet(meet, user)
            self.post[n], self.depth[n] = meet, self.depth[meet] + 1

    def groups(self) -> list[list[Op]]:
        """Contractions first, then row ops, then elementwise chains, each seeding a group
        that grows as far as the rules allow; every group in topological order. A constant
        seeds none: it is folded (`folded`), or a contraction's prologue."""
        groups: list[list[Op]] = []
        for fusion in (CONTRACTION, ROW, INJECTIVE):
            for seed, op in enumerate(self.ops):
                if seed in self.group_of or op.output in self.constant:
                    continue
                if self._fusion(op) == fusion:
                    members = self._grow(seed, len(groups))
                    groups.append([self.ops[n] for n in sorted(members)])
        return self._in_order(self._attention(groups))

    def _in_order(self, groups: list[list[Op]]) -> list[list[Op]]:
        """The groups in an order they can run in: each after the groups it reads, else by
        its first op (a conv whose epilogue concatenates another conv's output runs after
        that conv, though its first op comes before)."""
        of = {self.producer[op.output]: g for g, group in enumerate(groups) for op in group}
        needs = [
            {of[p] for op in group for p in self._producers(self.producer[op.output]) if p in of}
            - {g}
            for g, group in enumerate(groups)
        ]
        waiting = sorted(range(len(groups)), key=lambda g: self.position[groups[g][0].name])
        done: dict[int, None] = {}  # in order
        while waiting:
            ready = next((g for g in waiting if needs[g] <= done.keys()), waiting[0])
            waiting.remove(ready)
            done[ready] = None
        return [groups[g] for g in done]

    def _attention(self, groups: list[list[Op]]) -> list[list[Op]]:
        """Each softmax between two contractions, the scores it reads and the contraction
        reading it as its weights, as one group (attention in its eager form): the scores
        and the weights are then no tensors a kernel must write."""
        of = {self.producer[op.output]: g for g, group in enumerate(groups) for op in group}

        def around(g: int) -> tuple[set[int], set[int]]:
            """The groups `g` reads and the groups that read it."""
            inside = [self.producer[op.output] for op in groups[g]]
            before = {of[p] for n in inside for p in self._producers(n) if p in of}
            after = {of[u] for n in inside for u in self._users(n)}
            return before - {g}, after - {g}

        def kept(g: int) -> bool:
            """Whether something besides the groups writes group `g`'s values out."""
            return any(self._outside(op.output) for op in groups[g])

        merged: set[int] = set()
        for g, group in enumerate(groups):
            anchors = [op for op in group if self._fusion(op) != INJECTIVE]
            before, after = around(g)
            if [op.kind for op in anchors] != ["softmax"] or len(before) != 1 or len(after) != 1:
                continue
            (scores,), (weighted,) = before, after
            ends = (scores, weighted)
            if merged & {scores, weighted} or kept(scores) or kept(g):
                continue
            if any(self._fusion(groups[n][0]) != CONTRACTION for n in ends):
                continue  # a contraction's group holds it first: its prologue is casts alone
            if around(scores)[1] != {g}:
                continue  # the scores are read elsewhere too
            members = {self.producer[op.output] for n in (scores, g, weighted) for op in groups[n]}
            if not (self._convex(members) and self._fits(members)):
                continue
            merged |= {g, weighted}
            for m in members:
                self.group_of[m] = scores
            groups[scores] = [self.ops[m] for m in sorted(members)]
        return [group for g, group in enumerate(groups) if g not in merged]

    def folded(self) -> list[Op]:
        """The constant ops no group took (`groups` first): computed once, not kernels."""
        return [op for n, op in enumerate(self.ops) if n not in self.group_of]

    def outputs(self, group: list[Op]) -> list[str]:
        """The values `group` computes that the model, an op left out or another group reads
        (or nothing reads: a value the model drops still has to be written somewhere)."""
        inside = {self.producer[op.output] for op in group}
        return [op.output for op in group if self._escapes(op.output, inside)]

    def _grow(self, seed: int, group: int) -> set[int]:
        """The group of `seed`: its prologue and epilogue, taken until neither grows."""
        members, anchor = {seed}, self.ops[seed]
        grown = True
        while grown:
            taken: set[int] = set()
            for n in sorted({p for m in members for p in self._producers(m)} - members):
                if self._prologue(n, members | taken, anchor):
                    taken.add(n)
            for m in sorted(members | taken):
                taken |= self._epilogue(m, members | taken, anchor)
            members |= taken
            grown = bool(taken)
        for m in members:
            self.group_of[m] = group
        return members

    def _prologue(self, n: int, members: set[int], anchor: Op) -> bool:
        """Whether producer `n` joins: an elementwise op all of whose readers are in the
        group; before a contraction, only a cast or what is computed from weights alone."""
        op, users = self.ops[n], self._users(n)
        if n in self.group_of or self._fusion(op) != INJECTIVE or self._outside(op.output):
            return False
        if not users or any(u not in members for u in users):
            return False
        contraction = self._fusion(anchor) == CONTRACTION
        # A constant is folded (the group reads it), but for what a contraction's product
        # reads (its weights' unpacking): an ancestor of the contraction itself.
        weights = self.ancestors[self.producer[anchor.output]] >> n & 1
        if op.output in self.constant and not (contraction and weights):
            return False
        if contraction and not (op.kind == "cast" or op.output in self.constant):
            return False
        return self._convex(members | {n}) and self._fits(members | {n})

    def _epilogue(self, m: int, members: set[int], anchor: Op) -> set[int]:
        """The ops on every path from member `m` to its post-dominator, that one included,
        if all may join: elementwise ops, or (in a row group) reductions over its rows."""
        end = self.post[m]
        if end == _SINK or end in members:
            return set()
        path = set(_bits(self.descendants[m] & self.ancestors[end] | 1 << end)) - members
        for n in path:
            op = self.ops[n]
            same_rows = op.kind == "reduce" and self._rows(op) == self._rows(anchor)
            if n in self.group_of or not (self._fusion(op) == INJECTIVE or same_rows):
                return set()
        if not (self._convex(members | path) and self._fits(members | path)):
            return set()
        return path

    def _meet(self, a: int, b: int) -> int:
        """The nearest common post-dominator of ops `a` and `b`."""
        while a != b:
            if self.depth[a] >= self.depth[b]:
                a = self.post[a] if a != _SINK else a
            else:
                b = self.post[b]
        return a

    def _convex(self, members: set[int]) -> bool:
        inside = sum(1 << m for m in members)
        above = below = 0
        for m in members:
            above |= self.ancestors[m]
            below |= self.descendants[m]
        return not (above & below & ~inside)

    def _fits(self, members: set[int]) -> bool:
        group = [self.ops[m] for m in sorted(members)]
        produced = {op.output for op in group}
        inputs = {
            v
            for m in members
            for v in self._reads(m)
            if v not in produced and self.graph.values[v].literal is None
        }
        return (
            len(inputs) <= MAX_INPUTS
            and len(self.outputs(group)) <= MAX_OUTPUTS
            and sum(self.computes[op.name] for op in group) <= MAX_COMPUTES
        )

    def _escapes(self, value: str, inside: set[int]) -> bool:
        users = self.consumers.get(value, [])
        return self._outside(value) or not users or any(u not in inside for u in users)

    def _outside(self, value: str) -> bool:
        return value in self.read_outside

    def _reads(self, n: int) -> list[str]:
        """The values op `n` reads, each once: what its inputs are, or what they view."""
        return list(dict.fromkeys(self.views.root(v) for v in self.ops[n].inputs if v))

    def _producers(self, n: int) -> list[int]:
        return [self.producer[v] for v in self._reads(n) if v in self.producer]

    def _users(self, n: int) -> list[int]:
        return self.consumers.get(self.ops[n].output, [])

    def _fusion(self, op: Op) -> str:
        return KINDS[op.kind].fusion

    def _rows(self, op: Op) -> tuple[tuple[int | str, ...], ...] | None:
        """A row op's rows: its input's kept and reduced extents."""
        if self._fusion(op) != ROW or op.inputs[0] is None or "axes" not in op.attrs:
            return None  # a window op's (pool, lrn) are no rows
        shape, reduced = self.graph.values[op.inputs[0]].shape, op.attrs["axes"]
        kept = tuple(e for d, e in enumerate(shape) if d not in reduced)
        return kept, tuple(shape[d] for d in reduced)


def _bits(mask: int) -> list[int]:
    """The positions of the bits set in `mask`, lowest first."""
    found = []
    while mask:
        low = mask & -mask
        found.append(low.bit_length() - 1)
        mask ^= low
    return found


def _emit(
    graph: Graph, views: _Views, op: Op, names: Names, known: dict[str, str]
) -> list[ComputeDecl]:
    """The computes of `op`, its operands read under their names in `known` (a value not
    there is named now: a dry run needs no group), a view's through its indexing."""

    def operand(value: str | None) -> Operand | None:
        if value is None:
            return None
        v = graph.values[value]
        root, indexing = views.resolve(value)
        literal = graph.values[root].literal
        text = None if literal is None else literal_text(literal)
        if text is not None:
            return Operand("", v.shape, v.dtype, text)
        if root not in known:
            known[root] = names.take(root)
        return Operand(known[root], v.shape, v.dtype, indexing=indexing)

    def temp(suffix: str) -> str:
        return names.take(f"{op.output}_{suffix}")

    out = graph.values[op.output]
    known[op.output] = names.take(op.output)
    call = Call(
        operands=tuple(operand(v) for v in op.inputs),
        out=Operand(known[op.output], out.shape, out.dtype),
        attrs=op.attrs,
        temp=temp,
    )
    emit = KINDS[op.kind].emit
    assert emit is not None  # views are read through, never emitted
    return emit(call)


def _signature(
    graph: Graph, views: _Views, group: list[Op], outputs: list[str]
) -> tuple[TaskSignature, tuple[str, ...]]:
    """The signature of one group (its inputs in the order first read, its ops' computes in
    order, the symbols its shapes use) and the values its inputs are."""
    names = Names()
    for symbol in graph.symbols:
        names.take(symbol)
    produced = {op.output for op in group}
    known: dict[str, str] = {}
    inputs: list[TensorDecl] = []
    for op in group:
        for value in op.inputs:
            root = None if value is None else views.root(value)
            v = None if root is None else graph.values[root]
            if v is None or root in produced or root in known:
                continue
            if v.literal is not None and literal_text(v.literal) is not None:
                continue
            known[v.name] = names.take(v.name)
            decl = {"name": known[v.name], "shape": list(v.shape), "dtype": v.dtype}
            inputs.append(TensorDecl.model_validate(decl))
    read = tuple(known)
    computes = [decl for op in group for decl in _emit(graph, views, op, names, known)]
    extents = [e for decl in inputs for e in decl.shape]
    extents += [e for decl in computes for e in decl.shape]
    extents += [e for decl in computes if decl.reduce for e in decl.reduce.axes.values()]
    signature = TaskSignature(
        name=_name(group),
        symbols={name: decl for name, decl in graph.symbols.items() if name in extents},
        inputs=inputs,
        computes=computes,
        outputs=[known[value] for value in outputs],
    )
    return signature, read


def _name(group: list[Op]) -> str:
    """A name for people: the anchor's kind, then the others' (`rms_norm` and `layer_norm`
    for those written as chains), cut at 64 characters from its end (the anchor says most)."""
    kinds = [op.kind for op in group]
    anchors = [op for op in group if KINDS[op.kind].fusion != INJECTIVE]
    means = [op for op in anchors if op.kind == "reduce" and op.attrs.get("op") == "mean"]
    if means and len(anchors) == len(means) and {"sqrt", "rsqrt"} & set(kinds):
        return "rms_norm" if len(means) == 1 else "layer_norm"
    if [KINDS[op.kind].fusion for op in anchors] == [CONTRACTION, ROW, CONTRACTION]:
        return "attention"
    first = anchors[0].kind if anchors else kinds[0]
    rest = [kind for kind in dict.fromkeys(kinds) if kind != first]
    return identifier("_".join([first, *rest])[:64])
