"""Chunked reads (`targets.gpu.schedule.vectors.chunked`): neighbouring reads of a row become
aligned vector loads, and nothing is chunked that is not provably aligned."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from tunehub.compiler.ir import Binary, Call, Const, Expr, Load
from tunehub.compiler.loop import Decl, add, const, mul, var
from tunehub.targets.gpu.schedule.vectors import chunked

KNOWN = {"r", "lane", "m", "n"}
SHAPES: dict[str, tuple[Expr, ...]] = {
    "X": (const(4), const(4096)),
    "W": (const(4096), const(512)),
    "S": (const(4096), const(128)),
    "Odd": (const(4), const(4100)),
}


def first_k(unit: int) -> Expr:
    """A lane's first k: a multiple of `unit` that the chunking must prove."""
    return mul(add(mul(var("r"), const(32)), var("lane")), const(unit))


def run_of(tensor: str, dtype: str, index: Callable[[int], Expr], count: int) -> list[Expr]:
    outer = var("n") if tensor in ("W", "S") else var("m")
    return [Load(tensor, (outer, index(v)), dtype) for v in range(count)]


def divided(index: Expr, by: int) -> Expr:
    return Binary("//", index, const(by), "int64")


def chunk(values: list[Expr]) -> tuple[list[Decl], list[Expr]]:
    counter = itertools.count()
    return chunked(values, SHAPES, KNOWN, lambda base: f"{base}{next(counter)}")


def lane_of(value: Expr, decls: list[Decl]) -> tuple[Load, int]:
    """The vector load a chunked value reads, and its lane."""
    assert isinstance(value, Call) and value.fn == "lane", value
    held = next(d for d in decls if d.name == getattr(value.args[0], "name", None))
    assert isinstance(held.init, Load) and isinstance(value.args[1], Const)
    return held.init, int(value.args[1].value)


def test_a_run_of_halves_and_its_packed_words_become_16_byte_loads() -> None:
    k0 = first_k(32)
    x = run_of("X", "float16", lambda v: add(k0, const(v)), 32)
    words = run_of("W", "uint32", lambda v: divided(add(k0, const(v)), 8), 32)
    scale = run_of("S", "float16", lambda v: divided(add(k0, const(v)), 32), 32)
    decls, values = chunk(x + words + scale)
    assert sorted(d.dtype for d in decls) == ["float16x8"] * 4 + ["uint32x4"]
    # X value v is lane v % 8 of the chunk at k0 + 8 (v // 8); word v, lane v // 8 of one.
    for v, value in enumerate(values[:32]):
        load, lane = lane_of(value, decls)
        assert load.tensor == "X" and lane == v % 8
        assert load.indices[1] == add(k0, const(8 * (v // 8)))
    assert [lane_of(value, decls)[1] for value in values[32:64]] == [v // 8 for v in range(32)]
    # One scale per run: nothing to group, read as it was.
    assert values[64:] == scale


def test_reads_not_provably_aligned_stay_scalar() -> None:
    unaligned = add(mul(var("r"), const(32)), var("lane"))  # any integer
    x = run_of("X", "float16", lambda v: add(unaligned, const(v)), 8)
    assert chunk(x) == ([], x)
    # Rows of 4100 halves start 8-byte aligned: 8-byte chunks, not 16.
    odd = run_of("Odd", "float16", lambda v: add(first_k(32), const(v)), 8)
    decls, values = chunk(odd)
    assert [d.dtype for d in decls] == ["float16x4", "float16x4"]
    assert [lane_of(value, decls)[1] for value in values] == [0, 1, 2, 3, 0, 1, 2, 3]


def test_reads_under_a_guard_stay_scalar() -> None:
    """`where(k > 0, X[k - 1], 0)` reads X[-1] if chunked eagerly at k = 0: left as it is."""
    k0 = first_k(32)
    guarded: list[Expr] = [
        Call(
            "where",
            (
                Binary(">", add(k0, const(v)), const(0), "bool"),
                Load("X", (var("m"), add(k0, const(v - 1))), "float16"),
                Const(0.0, "float16"),
            ),
            "float16",
        )
        for v in range(16)
    ]
    assert chunk(guarded) == ([], guarded)
