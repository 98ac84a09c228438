"""The C dialect (gcc/clang with OpenMP): a thin layer over `CStyleRenderer`.

Parallel loops become `#pragma omp parallel for collapse(n) schedule(static)`, vectorized
loops `#pragma omp simd simdlen(n)` (the compiler's vectorizer keeps guarded reads correct),
unrolled loops `#pragma GCC unroll n`; vector values are GCC vector extensions. float16 and
bfloat16 convert by bit manipulation with round-to-nearest-even (which the vectorizer
handles), and float16 vectors a register at a time with AVX-512F or F16C instructions where the
kernel's ISA has them. Without `-fopenmp` the pragmas are ignored and the kernel runs on one
thread.
"""

from __future__ import annotations

from tunehub.compiler import dtypes
from tunehub.compiler.loop import (
    HORIZONTAL,
    For,
    Function,
    const_value,
    lanes,
    scalar,
    stmts,
    vector,
)
from tunehub.compiler.render.cstyle import CStyleRenderer
from tunehub.compiler.render.helpers import compute
from tunehub.targets.cpu.loop import OFFSET_WORD, TILE_ROWS, Dot, DotLoad, Tile

# A kernel without vectorized loops stays scalar: gcc -O3 would otherwise vectorize the naive
# baseline on its own. gcc 12 has no per-loop switch, and this one also disables `omp simd`,
# so it is emitted only when no loop asks for vectors. File-wide, so that the helpers keep the
# entry's options and are still inlined into it.
_NO_AUTO_VECTORIZE = '#pragma GCC optimize("no-tree-loop-vectorize")'
_INCLUDES = ["#include <math.h>", "#include <stdbool.h>", "#include <stdint.h>"]
_INCLUDES += ["#include <stdlib.h>", ""]
_OPENMP_RUNTIME = """#ifdef _OPENMP
#include <omp.h>
#else
static inline int omp_get_thread_num(void) { return 0; }
static inline int omp_get_max_threads(void) { return 1; }
#endif
"""
_OMP_OPS = {"sum": "+", "prod": "*", "max": "max", "min": "min"}
_SELECTS = {"max": ">", "min": "<"}  # vector helpers written as a compare and a bit select
_MASKS = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}  # a comparison's lanes, by width
_INTRINSICS = "#if defined(__x86_64__)\n#include <immintrin.h>\n#endif"
_NEAREST = "_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC"
_F16C_SCALAR = {
    "load": "  return _cvtsh_ss(x);",
    "store": f"  return _cvtss_sh(x, {_NEAREST});",
}
# x86 conversions of float16 lanes, widest first, each compiled where the kernel's own ISA
# flags define its macro (F16C is part of x86-64-v3): lanes, macro, register type, and the
# conversion of {p} (a lane pointer) to floats, of a register {w} to halves at {p}, and of a
# register {w} rounded to halves and back. gcc 12 scalarizes `_Float16` vector conversions
# (one vcvtph2ps per lane), so these are written with the intrinsics.
_F16_CHUNKS = (
    (
        16,
        "__AVX512F__",
        "__m512",
        "_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)({p})))",
        f"_mm256_storeu_si256((__m256i*)({{p}}), _mm512_cvtps_ph({{w}}, {_NEAREST}))",
        f"_mm512_cvtph_ps(_mm512_cvtps_ph({{w}}, {_NEAREST}))",
    ),
    (
        8,
        "__F16C__",
        "__m256",
        "_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)({p})))",
        f"_mm_storeu_si128((__m128i*)({{p}}), _mm256_cvtps_ph({{w}}, {_NEAREST}))",
        f"_mm256_cvtph_ps(_mm256_cvtps_ph({{w}}, {_NEAREST}))",
    ),
    (
        4,
        "__F16C__",
        "__m128",
        "_mm_cvtph_ps(_mm_loadl_epi64((const __m128i*)({p})))",
        f"_mm_storel_epi64((__m128i*)({{p}}), _mm_cvtps_ph({{w}}, {_NEAREST}))",
        f"_mm_cvtph_ps(_mm_cvtps_ph({{w}}, {_NEAREST}))",
    ),
)
_HALF = {
    # Exact IEEE conversions in plain integer and float arithmetic (bit for bit what F16C's
    # vcvtph2ps / vcvtps2ph give, round to nearest even, NaN payloads kept; checked over all
    # 2^16 halves and 2^32 floats), which gcc vectorizes: with `_Float16` a loop holding a
    # conversion is never vectorized without AVX512-FP16.
    "float16": {
        "load": "  uint32_t em = (uint32_t)(x & 0x7fffu) << 13, u;\n  float f;\n"
        "  __builtin_memcpy(&f, &em, 4);\n  f *= 0x1p112f;\n  __builtin_memcpy(&u, &f, 4);\n"
        "  u = em >= 0x0f800000u ? (em | 0x7f800000u) : u;\n"
        "  u |= (uint32_t)(x & 0x8000u) << 16;\n  __builtin_memcpy(&f, &u, 4);\n  return f;",
        "store": "  uint32_t u, d;\n  __builtin_memcpy(&u, &x, 4);\n"
        "  uint32_t sign = u & 0x80000000u;\n  u ^= sign;\n  float a;\n"
        "  __builtin_memcpy(&a, &u, 4);\n  a += 0.5f;\n  __builtin_memcpy(&d, &a, 4);\n"
        "  d -= 0x3f000000u;\n  uint32_t n = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;\n"
        "  uint32_t nan = u > 0x7f800000u ? (0x7e00u | ((u >> 13) & 0x3ffu)) : 0x7c00u;\n"
        "  uint32_t o = u >= 0x47800000u ? nan : (u < 0x38800000u ? d : n);\n"
        "  return (uint16_t)(o | (sign >> 16));",
    },
    "bfloat16": {
        "load": "  uint32_t u = (uint32_t)x << 16;\n  float f;\n  __builtin_memcpy(&f, &u, 4);\n"
        "  return f;",
        "store": "  uint32_t u;\n  __builtin_memcpy(&u, &x, 4);\n"
        "  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);\n"
        "  u += 0x7fffu + ((u >> 16) & 1u);\n  return (uint16_t)(u >> 16);",
    },
}


# A dot instruction's intrinsic by instruction and register bits, and the register type.
_DOTS = {
    ("vdpbf16ps", 512): ("_mm512_dpbf16_ps", "__m512", "__m512bh"),
    ("vpdpbusd", 512): ("_mm512_dpbusd_epi32", "__m512i", "__m512i"),
    ("vpdpbusd", 256): ("_mm256_dpbusd_avx_epi32", "__m256i", "__m256i"),
}
_REGISTERS = {
    512: ("__m512i", "_mm512_loadu_si512", "_mm512_set1_epi32"),
    256: ("__m256i", "_mm256_loadu_si256", "_mm256_set1_epi32"),
}
# Every tile 16 rows of 64 bytes (palette 1), loaded into this thread's tile configuration
# from one constant block (built once, not on every tile of the kernel).
_TILE_CONFIG = f"""static inline void tile_config(void) {{
  static const struct {{
    uint8_t palette, start; uint8_t reserved[14]; uint16_t colsb[16]; uint8_t rows[16];
  }} __attribute__((aligned(64))) cfg = {{
    1, 0, {{0}}, {{{", ".join(["64"] * 8)}}}, {{{", ".join([str(TILE_ROWS)] * 8)}}}
  }};
  _tile_loadconfig(&cfg);
}}"""
# float32 lanes rounded to bfloat16 (nearest even; a NaN stays a quiet NaN), as `store_bf16`
# rounds one value, on GCC vectors: a compare's lanes are all ones where it holds.
_BF16_ROUND = """  {ut} u;
  __builtin_memcpy(&u, &x, sizeof u);
  {ut} nan = ({ut})((u & 0x7fffffffu) > 0x7f800000u);
  {ut} even = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  {ut} quiet = (u | 0x00400000u) & 0xffff0000u;
  {ut} bits = (even & ~nan) | (quiet & nan);
  {vt} r;
  __builtin_memcpy(&r, &bits, sizeof r);
  return r;"""
# A 32-bit word read from any buffer (a memcpy: no aliasing rule broken; one load).
_WORD = (
    "static inline int32_t word32(const void* p) {\n  int32_t w;\n"
    "  __builtin_memcpy(&w, p, 4);\n  return w;\n}"
)


class CRenderer(CStyleRenderer):
    language = "c"

    def preamble(self, fn: Function) -> list[str]:
        runtime = [_OPENMP_RUNTIME] if any(ws.per_thread for ws in fn.workspaces) else []
        vectorized = any(
            isinstance(s, For) and (s.kind == "vectorize" or (s.kind == "parallel" and s.factor))
            for s in stmts(fn.body)
        )
        return [*([] if vectorized else [_NO_AUTO_VECTORIZE]), *_INCLUDES, *runtime]

    def _horizontal(self, fn: str, dtype: str) -> str:
        """A vector reduced to one lane as a tree: each step combines the vector with itself
        rotated by half of what is left, log2(n) dependent operations where a chain over the
        lanes has n - 1 (an rmsnorm row's normalize pass waited for 15 dependent scalar adds
        of its sum of squares)."""
        n, element = lanes(dtype), scalar(dtype)
        if n & (n - 1) or compute(element) != element:
            return super()._horizontal(fn, dtype)
        op = HORIZONTAL[fn]
        operator = {"sum": "+", "prod": "*"}.get(op)
        steps = []
        half = n // 2
        while half:
            order = ", ".join(str((i + half) % n) for i in range(n))
            rotated = f"__builtin_shufflevector(v, v, {order})"
            if operator is None:
                steps.append(f"  v = {self.math(op, dtype)}(v, {rotated});")
            else:
                steps.append(f"  v = v {operator} {rotated};")
            half //= 2
        vt = self.ctype(dtype)
        body = "\n".join(steps) + "\n  return v[0];"
        return self._helper(f"{fn}_{vt}", self.types[element], f"{vt} v", body)

    def math(self, fn: str, dtype: str) -> str:
        if lanes(dtype) > 1 and fn in _SELECTS:
            return self._select(fn, dtype)
        return super().math(fn, dtype)

    def _select(self, fn: str, dtype: str) -> str:
        """max/min of two vectors as a lane compare and a bit select, lane for lane what the
        scalar helper gives (a NaN on either side comes out). gcc made the scalar helper's
        lane loop a branch per lane: a relu epilogue ran at half the kernel's speed on random
        data (a 256^3 matmul with bias, relu and a float16 store: 0.386 -> 0.140 ms)."""
        vt, n = self.ctype(dtype), lanes(dtype)
        element = scalar(compute(dtype))
        mask = self.ctype(vector(_MASKS[dtypes.itemsize(element)], n))
        nan = " | (x != x)" if dtypes.is_float(element) else ""
        body = (
            f"  {mask} m = (x {_SELECTS[fn]} y){nan};\n"
            f"  return ({vt})((({mask})x & m) | (({mask})y & ~m));"
        )
        return self._helper(f"{fn}_{vt}", vt, f"{vt} x, {vt} y", body)

    def half_helpers(self, dtype: str, vectorized: bool) -> dict[str, str]:
        """The bit-manipulating forms, which vectorize; one value at a time, F16C's scalar
        conversions where the ISA has them (one instruction against a dozen)."""
        if dtype != "float16" or vectorized:
            return _HALF[dtype]
        self.need("immintrin", _INTRINSICS)
        return {
            kind: f"#if defined(__F16C__)\n{f16c}\n#else\n{_HALF[dtype][kind]}\n#endif"
            for kind, f16c in _F16C_SCALAR.items()
        }

    def half_vector(self, kind: str, dtype: str, n: int) -> str | None:
        """float16 lanes converted a register at a time where the ISA has the instructions
        (AVX-512F, F16C), the lane loop elsewhere; both round to nearest even. bfloat16
        lanes round a register at a time by the scalar form's bit arithmetic (`_BF16_ROUND`):
        a dequantized weight rounded lane by lane was most of an int4 linear's packing."""
        if dtype == "bfloat16" and kind == "round":
            vt, ut = self.ctype(f"float32x{n}"), self.ctype(f"uint32x{n}")
            return _BF16_ROUND.format(vt=vt, ut=ut)
        if dtype != "float16":
            return None
        branches = []
        for macro in dict.fromkeys(chunk[1] for chunk in _F16_CHUNKS):
            fits = [c for c in _F16_CHUNKS if c[1] == macro and n % c[0] == 0]
            if fits:
                branches.append((macro, self._chunked(kind, fits[0], n)))
        if not branches:
            return None
        self.need("immintrin", _INTRINSICS)
        lines = []
        for number, (macro, body) in enumerate(branches):
            lines += [f"#{'if' if number == 0 else 'elif'} defined({macro})", body]
        lines += ["#else", self._lane_loop(kind, dtype, n), "#endif"]
        if kind == "vstore":
            return "\n".join(lines)
        return "\n".join([f"  {self.ctype(f'float32x{n}')} r = {{0}};", *lines, "  return r;"])

    def _chunked(self, kind: str, chunk: tuple[str | int, ...], n: int) -> str:
        width, _, register, load, store, rounded = chunk
        step = f"  for (int c = 0; c < {n}; c += {width}) {{ "
        if kind == "vload":
            w = str(load).format(p="p + c")
            return f"{step}{register} w = {w}; __builtin_memcpy((float*)&r + c, &w, sizeof w); }}"
        source = "v" if kind == "vstore" else "x"
        take = f"{register} w; __builtin_memcpy(&w, (const float*)&{source} + c, sizeof w); "
        if kind == "vstore":
            return f"{step}{take}{str(store).format(p='p + c', w='w')}; }}"
        put = f"w = {str(rounded).format(w='w')}; __builtin_memcpy((float*)&r + c, &w, sizeof w);"
        return f"{step}{take}{put} }}"

    def _lane_loop(self, kind: str, dtype: str, n: int) -> str:
        loop = f"  for (int l = 0; l < {n}; l++) "
        if kind == "vload":
            return f"{loop}r[l] = {self.half('load', dtype, True)}(p[l]);"
        if kind == "vstore":
            return f"{loop}p[l] = {self.half('store', dtype, True)}(v[l]);"
        return f"{loop}r[l] = {self.half('round', dtype, True)}(x[l]);"

    def _stmt_DotLoad(self, stmt: DotLoad, depth: int) -> list[str]:
        self.need("immintrin", _INTRINSICS)
        register, load, _ = _REGISTERS[stmt.bits]
        at = f"&{self._element(stmt.buffer, (stmt.offset,))}"
        return [f"{self.indent * depth}{register} {stmt.name} = {load}((const void*)({at}));"]

    def _stmt_Dot(self, stmt: Dot, depth: int) -> list[str]:
        """The accumulator (a GCC vector) cast to the intrinsic's register type and back:
        both are vectors of the same size, so the casts are free."""
        self.need("immintrin", _INTRINSICS)
        intrinsic, acc_type, operand_type = _DOTS[(stmt.instruction, stmt.bits)]
        broadcast = _REGISTERS[stmt.bits][2]
        if stmt.buffer:
            word = f"{self.need('word32', _WORD)}(&{self._element(stmt.buffer, stmt.indices)})"
        else:
            word = f"(int32_t){OFFSET_WORD}u"
        vt = self.ctype(self.locals[stmt.acc][0])
        a, b = f"({operand_type}){broadcast}({word})", f"({operand_type}){stmt.operand}"
        call = f"{intrinsic}(({acc_type}){stmt.acc}, {a}, {b})"
        return [f"{self.indent * depth}{stmt.acc} = ({vt}){call};"]

    def _stmt_Tile(self, stmt: Tile, depth: int) -> list[str]:
        self.need("immintrin", _INTRINSICS)
        pad = self.indent * depth
        if stmt.op == "config":
            return [f"{pad}{self.need('tile_config', _TILE_CONFIG)}();"]
        if stmt.op == "zero":
            return [f"{pad}_tile_zero({stmt.tile});"]
        if stmt.op == "dot":
            return [f"{pad}_tile_{stmt.instruction[1:]}({stmt.tile}, {stmt.a}, {stmt.b});"]
        at = f"&{self._element(stmt.buffer, stmt.indices)}"
        stride = self.expr(stmt.stride)
        if stmt.op == "load":
            return [f"{pad}_tile_loadd({stmt.tile}, {at}, {stride});"]
        return [f"{pad}_tile_stored({stmt.tile}, {at}, {stride});"]

    def thread_index(self) -> str:
        return "omp_get_thread_num()"

    def thread_count(self) -> str:
        return "omp_get_max_threads()"

    def loop_pragmas(self, loop: For, collapse: int, reduction: list[tuple[str, str]]) -> list[str]:
        clauses = [f"reduction({_OMP_OPS[op]}:{name})" for op, name in reduction]
        if loop.kind == "parallel":
            head = "#pragma omp parallel for simd" if loop.factor else "#pragma omp parallel for"
            nest = [f"collapse({collapse})"] if collapse > 1 else []
            width = [f"simdlen({loop.factor})"] if loop.factor else []
            return [" ".join([head, *nest, "schedule(static)", *width, *clauses])]
        if loop.kind == "vectorize":
            width = [f"simdlen({loop.factor})"] if loop.factor else []
            return [" ".join(["#pragma omp simd", *width, *clauses])]
        if loop.kind == "unroll":
            factor = loop.factor or const_value(loop.extent)
            return [f"#pragma GCC unroll {factor}"] if factor else []
        return []
