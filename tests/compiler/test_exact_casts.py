"""16-bit float casts of integers the format holds exactly are conversions, not roundings:
the ranges they are proved from, the casts dropped and kept, and kernels that still compute
their reference (a cast that must round keeps rounding)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.compiler.cbuild import HOST, call, check_configs
from tunehub.compiler.exact_casts import integer_range
from tunehub.compiler.ir import Binary, Cast, Const, Load
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for

WORD = Load("W", (Const(0, "int64"),), "uint32")


def test_ranges_of_unpacked_levels_and_narrow_integers() -> None:
    shifted = Binary(">>", WORD, Cast("uint32", Const(12, "int64")), "uint32")
    level = Binary("&", shifted, Cast("uint32", Const(15, "int64")), "uint32")
    assert integer_range(level) == (0, 15)
    assert integer_range(Binary("-", Cast("int32", level), Const(7, "int32"), "int32")) == (-7, 8)
    assert integer_range(Load("q", (Const(0, "int64"),), "int8")) == (-128, 127)
    assert integer_range(Binary("%", WORD, Const(8, "uint32"), "uint32")) == (0, 7)
    assert integer_range(WORD) == (0, 2**32 - 1)


def signature(expr: str, dtype: str, source: str) -> dict[str, Any]:
    return {
        "version": 1,
        "name": "cast",
        "inputs": [{"name": "a", "shape": [37], "dtype": source}],
        "computes": [{"name": "y", "axes": ["i"], "shape": [37], "dtype": dtype, "expr": expr}],
        "outputs": ["y"],
    }


def rounds(doc: dict[str, Any]) -> bool:
    """Whether the kernel's arithmetic rounds to 16 bits anywhere before its store."""
    program = load(doc)
    source = lower(program, HOST, space_for(program, HOST).naive()).source
    entry = source[source.index("int tunehub_cast(") :]
    return any(helper in entry for helper in ("round_f16", "roundf16", "round_bf16", "roundbf16"))


def test_casts_of_exact_integers_are_dropped_and_others_kept() -> None:
    exact = signature("float16(float16(a[i] & 15) - float16(7)) * 0.5", "float32", "uint8")
    assert not rounds(exact)
    assert not rounds(signature("float32(bfloat16(a[i])) * 0.5", "float32", "uint8"))
    assert rounds(signature("float32(bfloat16(a[i])) * 0.5", "float32", "int16"))
    assert rounds(signature("float32(float16(a[i] * 3)) * 0.5", "float32", "int16"))


def test_kernels_keep_their_values() -> None:
    """A level cast exactly; an int16 cast that rounds (4097 -> 4096), both as the reference."""
    for doc in (
        signature("float16(float16(a[i] & 15) - float16(7)) * 0.5", "float32", "uint8"),
        signature("float32(float16(a[i])) + 0.25", "float32", "int16"),
    ):
        program = load(doc)
        space = space_for(program, HOST)
        check_configs(program, HOST, [space.naive(), space.default()], {})
    program = load(signature("float32(float16(a[i]))", "float32", "int16"))
    kernel = lower(program, HOST, space_for(program, HOST).naive())
    a = np.full(37, 4097, np.int16)
    out = np.zeros(37, np.float32)
    assert call(kernel, {"a": a, "y": out}, {}) == 0
    assert (out == 4096).all()
