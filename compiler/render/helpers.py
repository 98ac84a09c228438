"""The helper functions a C-family kernel defines before its entry point, each printed once
and only where the kernel uses it: vector types, math (bodies from `compiler.render.cmath`),
16-bit float conversions, and vector loads, stores, broadcasts and horizontal reductions.

`CHelpers` is the base of `cstyle.CStyleRenderer`: it holds a dialect's type maps and makes
the helpers, through hooks a dialect overrides (`half_helpers`, `half_vector`, or a maker
itself: CUDA's vector types and aligned vector accesses, the C dialect's horizontal reductions
as trees and its max/min as bit selects). A helper is named for what it computes and on what
(`exp_f32`, `load_f16v`, `vload_f16x8`, `hsum_f32x8`), so that asking twice gives one.
"""

from __future__ import annotations

from typing import ClassVar

from tunehub.compiler import dtypes
from tunehub.compiler.loop import HORIZONTAL, lanes, scalar, vector
from tunehub.compiler.render.cmath import (
    BINARY_MATH,
    FLOAT32_MATH,
    FLOAT_MATH,
    SIGNED_MATH,
    UNSIGNED,
    UNSIGNED_MATH,
)

CODES = {
    "float64": "f64",
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint32": "u32",
    "uint8": "u8",
    "bool": "b8",
}


def compute(dtype: str) -> str:
    """The compute dtype of a scalar or vector dtype (16-bit floats compute as float32)."""
    return vector(dtypes.compute_dtype(scalar(dtype)), lanes(dtype))


class CHelpers:
    """The helpers of the function being rendered (`helpers`, name -> definition, in the
    order they were first asked for) and the type maps they are written in."""

    helper_prefix = "static inline "
    types: ClassVar[dict[str, str]] = {
        "float64": "double",
        "float32": "float",
        "int64": "int64_t",
        "int32": "int32_t",
        "int16": "int16_t",
        "int8": "int8_t",
        "uint32": "uint32_t",
        "uint8": "uint8_t",
        "bool": "bool",
    }
    storage_types: ClassVar[dict[str, str]] = {
        **types,
        "float16": "uint16_t",
        "bfloat16": "uint16_t",
    }
    # float32 functions rendered from these bodies instead of the libm-style `FLOAT_MATH`.
    float32_math: ClassVar[dict[str, str]] = FLOAT32_MATH
    helpers: dict[str, str]  # set by `CStyleRenderer.render` for each function
    _simd: int  # loops around the statement being printed that are vectorized

    # ---------------------------------------------------------------- hooks

    def half_helpers(self, dtype: str, vectorized: bool) -> dict[str, str]:
        """C bodies of `load` (bits -> float) and `store` (float -> bits) for a 16-bit float
        dtype, argument `x`: forms a vectorizing compiler handles where `vectorized`."""
        raise NotImplementedError

    def half_vector(self, kind: str, dtype: str, n: int) -> str | None:
        """A faster C body for `vload` (`p` -> n floats), `vstore` (`v` -> `p`) or `round`
        (`x` -> n floats) of n lanes of a 16-bit float dtype, or None for the lane loop. It
        must give the lane loop's bits exactly."""
        return None

    # ---------------------------------------------------------------- helpers

    def need(self, name: str, definition: str) -> str:
        """Register a helper (once; its own dependencies must be registered first)."""
        self.helpers.setdefault(name, definition)
        return name

    def ctype(self, dtype: str) -> str:
        """The C type holding values of a compute dtype (vector types are declared here)."""
        dtype = compute(dtype)
        if lanes(dtype) == 1:
            return self.types[dtype]
        name = f"{CODES[scalar(dtype)]}x{lanes(dtype)}"
        size = dtypes.itemsize(scalar(dtype)) * lanes(dtype)
        element = self.types[scalar(dtype)]
        return self.need(name, f"typedef {element} {name} __attribute__((vector_size({size})));")

    def math(self, fn: str, dtype: str) -> str:
        """The helper computing `fn` on values of `dtype` (lane by lane for vectors)."""
        if lanes(dtype) > 1:
            return self._lanewise(fn, self.math(fn, scalar(dtype)), dtype, fn in BINARY_MATH)
        dtype = compute(dtype)
        t = self.types[dtype]
        if dtype == "float32" and fn in self.float32_math:
            template = self.float32_math[fn]
            if fn != "exp" and "exp_f32(" in template:
                self.math("exp", dtype)
        elif dtypes.is_float(dtype):
            template = FLOAT_MATH[fn]
        else:
            template = (SIGNED_MATH if dtypes.is_signed(dtype) else UNSIGNED_MATH)[fn]
        text = template.format(f="f" if dtype == "float32" else "", T=t, U=UNSIGNED.get(dtype))
        params = f"{t} x, {t} y" if fn in BINARY_MATH else f"{t} x"
        return self._helper(f"{fn}_{CODES[dtype]}", t, params, f"  {text}")

    def _lanewise(self, fn: str, base: str, dtype: str, binary: bool) -> str:
        """A vector helper applying the scalar helper `base` to each lane."""
        vt, n = self.ctype(dtype), lanes(dtype)
        params = f"{vt} x, {vt} y" if binary else f"{vt} x"
        args = "x[l], y[l]" if binary else "x[l]"
        # `r` starts as `x`, every lane then replaced: declared bare, gcc 12 warned it "may
        # be used uninitialized" on some hosts' inlining (an error under -Werror).
        body = f"  {vt} r = x;\n  for (int l = 0; l < {n}; l++) r[l] = {base}({args});\n  return r;"
        return self._helper(f"{fn}_{vt}", vt, params, body)

    def _helper(self, name: str, result: str, params: str, body: str) -> str:
        return self.need(name, f"{self.helper_prefix}{result} {name}({params}) {{\n{body}\n}}")

    def half(self, kind: str, dtype: str, vectorized: bool | None = None) -> str:
        """The `load`, `store` or `round` conversion helper of a 16-bit float dtype: the
        dialect's vectorizable form where the C compiler vectorizes the code around it (a
        loop it is asked to vectorize, unless `vectorized` says otherwise)."""
        vectorized = self._simd > 0 if vectorized is None else vectorized
        code, storage = CODES[dtype] + ("v" if vectorized else ""), self.storage_types[dtype]
        if kind == "round":
            load, store = (
                self.half("load", dtype, vectorized),
                self.half("store", dtype, vectorized),
            )
            body = f"  return {load}({store}(x));"
        else:
            body = self.half_helpers(dtype, vectorized)[kind]
        result, param = {
            "load": ("float", f"{storage} x"),
            "store": (storage, "float x"),
            "round": ("float", "float x"),
        }[kind]
        return self._helper(f"{kind}_{code}", result, param, body)

    def _lane_helper(self, kind: str, dtype: str) -> str:
        """vload/vstore/bcast for a vector of `dtype` (storage dtype for vload/vstore)."""
        n, element = lanes(dtype), scalar(dtype)
        vt = self.ctype(dtype)
        st = self.storage_types[element]
        name = f"{kind}_{CODES[element]}x{n}"
        if kind == "bcast":
            # An initializer of n copies is what gcc turns into one broadcast instruction
            # (a lane loop becomes a chain of masked broadcasts).
            body = f"  return ({vt}){{{', '.join(['x'] * n)}}};"
            return self._helper(name, vt, f"{self.types[compute(element)]} x", body)
        if dtypes.is_half(element):
            load, store = self.half("load", element, True), self.half("store", element, True)
            loop = f"  for (int l = 0; l < {n}; l++) "
            fast = self.half_vector(kind, element, n)
            if kind == "vload":
                body = fast or f"  {vt} r = {{0}};\n{loop}r[l] = {load}(p[l]);\n  return r;"
                return self._helper(name, vt, f"const {st}* p", body)
            body = fast or f"{loop}p[l] = {store}(v[l]);"
            return self._helper(name, "void", f"{st}* p, {vt} v", body)
        if kind == "vload":
            body = f"  {vt} r;\n  __builtin_memcpy(&r, p, sizeof r);\n  return r;"
            return self._helper(name, vt, f"const {st}* p", body)
        return self._helper(
            name, "void", f"{st}* p, {vt} v", "  __builtin_memcpy(p, &v, sizeof v);"
        )

    def _horizontal(self, fn: str, dtype: str) -> str:
        n, element = lanes(dtype), compute(scalar(dtype))
        vt, t = self.ctype(dtype), self.types[element]
        op = HORIZONTAL[fn]
        combine = {"sum": "s + v[l]", "prod": "s * v[l]"}.get(op)
        if combine is None:
            combine = f"{self.math(op, element)}(s, v[l])"
        body = f"  {t} s = v[0];\n  for (int l = 1; l < {n}; l++) s = {combine};\n  return s;"
        return self._helper(f"{fn}_{vt}", t, f"{vt} v", body)
