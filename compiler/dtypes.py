"""Element types of the IR and how they combine.

Arithmetic on float16 and bfloat16 is evaluated in float32; a value is rounded to the 16-bit
type only where the program casts to it or a compute stores it. The reference evaluator and
every renderer follow this rule, so results differ only by summation order.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

FLOATS = ("float64", "float32", "float16", "bfloat16")
SIGNED = ("int64", "int32", "int16", "int8")
UNSIGNED = ("uint32", "uint8")
INTS = SIGNED + UNSIGNED
ALL = (*FLOATS, *INTS, "bool")

# Axes and symbols are 64-bit signed integers: index arithmetic never overflows on real shapes.
INDEX = "int64"

BITS = {
    "float64": 64,
    "float32": 32,
    "float16": 16,
    "bfloat16": 16,
    "int64": 64,
    "int32": 32,
    "int16": 16,
    "int8": 8,
    "uint32": 32,
    "uint8": 8,
    "bool": 8,
}


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def is_int(dtype: str) -> bool:
    return dtype in INTS


def is_signed(dtype: str) -> bool:
    return dtype in SIGNED


HALF = ("float16", "bfloat16")


def is_half(dtype: str) -> bool:
    """16-bit floats: stored narrow, computed in float32."""
    return dtype in HALF


def compute_dtype(dtype: str) -> str:
    """The type arithmetic on `dtype` values is actually carried out in."""
    return "float32" if is_half(dtype) else dtype


def promote(a: str, b: str) -> str:
    """Result type of a binary arithmetic operation on two typed (non-literal) operands.

    bool yields to anything; a float beats an int; the wider float wins, and float16 with
    bfloat16 gives float32; among integers the wider wins, and mixing signedness picks a
    signed type wide enough for both.
    """
    if a == b:
        return a
    if a == "bool":
        return b
    if b == "bool":
        return a
    if is_float(a) and is_float(b):
        if BITS[a] == BITS[b]:
            return "float32"
        return a if BITS[a] > BITS[b] else b
    if is_float(a):
        return a
    if is_float(b):
        return b
    if is_signed(a) == is_signed(b):
        return a if BITS[a] > BITS[b] else b
    signed, unsigned = (a, b) if is_signed(a) else (b, a)
    if BITS[signed] > BITS[unsigned]:
        return signed
    return {8: "int16", 32: "int64"}.get(BITS[unsigned], "int64")


def to_numpy(dtype: str) -> np.dtype:
    """The numpy dtype that holds values of `dtype` in memory (bfloat16 via ml_dtypes)."""
    if dtype == "bfloat16":
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype("bool" if dtype == "bool" else dtype)


def itemsize(dtype: str) -> int:
    return to_numpy(dtype).itemsize
