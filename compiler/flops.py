"""The floating-point operations of a program: the usual GFLOP/s numerator.

A contraction counts a multiply and an add per term. An attention chain
(`compiler.attention`) counts at its real cost, whichever class its stages have (scores that
read q and k in one tensor are a reduction by class): its two matmuls, `2 * L * S * E` and
`2 * L * S * Ev` per head, and its softmax's five operations per score (the max, the
subtraction, the exponential, the sum and the division). Other stages count nothing: their
cost is memory, not arithmetic.
"""

from __future__ import annotations

import math

from tunehub.compiler import attention
from tunehub.compiler.analysis import CONTRACTION, Stage, analyze
from tunehub.compiler.ir import Program

SOFTMAX_PER_SCORE = 5


def contraction_flops(program: Program, symbols: dict[str, int]) -> int | None:
    """The FLOPs of the program's contractions and attention chains (see the module doc);
    None when it has none (softmax, elementwise)."""
    analysis = analyze(program)
    chains = attention.chains(analysis)
    inside = {s.index for chain in chains for s in chain.members}
    total = 0
    for stage in analysis.stages:
        if stage.kind == CONTRACTION and stage.index not in inside:
            total += 2 * _terms(program, stage, symbols)
    for chain in chains:
        scores, _, _, out = chain.members
        total += 2 * _terms(program, scores, symbols) + 2 * _terms(program, out, symbols)
        points = math.prod(program.extent(e, symbols) for e in scores.shape)
        total += SOFTMAX_PER_SCORE * points
    return total or None


def _terms(program: Program, stage: Stage, symbols: dict[str, int]) -> int:
    """The terms a reduction stage sums: its points times its reduce extents."""
    points = math.prod(program.extent(e, symbols) for e in stage.shape)
    return points * math.prod(program.extent(r.extent, symbols) for r in stage.anchor.reduce_axes)
