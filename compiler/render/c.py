"""The C dialect (gcc/clang with OpenMP): a thin layer over `CStyleRenderer`.

Parallel loops become `#pragma omp parallel for collapse(n) schedule(static)`, vectorized
loops `#pragma omp simd simdlen(n)` (the compiler's vectorizer keeps guarded reads correct),
unrolled loops `#pragma GCC unroll n`; vector values are GCC vector extensions. float16
converts through `_Float16` (gcc >= 12 on x86-64 and aarch64: hardware instructions where the
ISA has them), bfloat16 by bit manipulation with round-to-nearest-even. Without `-fopenmp` the
pragmas are ignored and the kernel runs on one thread.
"""

from __future__ import annotations

from compiler.loop import For, Function, const_value, stmts
from compiler.render.cstyle import CStyleRenderer

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
_HALF = {
    "float16": {
        "load": "  _Float16 h;\n  __builtin_memcpy(&h, &x, 2);\n  return (float)h;",
        "store": "  _Float16 h = (_Float16)x;\n  uint16_t r;\n  __builtin_memcpy(&r, &h, 2);\n"
        "  return r;",
        "round": "  return (float)(_Float16)x;",
    },
    "bfloat16": {
        "load": "  uint32_t u = (uint32_t)x << 16;\n  float f;\n  __builtin_memcpy(&f, &u, 4);\n"
        "  return f;",
        "store": "  uint32_t u;\n  __builtin_memcpy(&u, &x, 4);\n"
        "  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);\n"
        "  u += 0x7fffu + ((u >> 16) & 1u);\n  return (uint16_t)(u >> 16);",
        "round": "  return load_bf16(store_bf16(x));",
    },
}


class CRenderer(CStyleRenderer):
    language = "c"

    def preamble(self, fn: Function) -> list[str]:
        runtime = [_OPENMP_RUNTIME] if any(ws.per_thread for ws in fn.workspaces) else []
        vectorized = any(
            isinstance(s, For) and (s.kind == "vectorize" or (s.kind == "parallel" and s.factor))
            for s in stmts(fn.body)
        )
        return [*([] if vectorized else [_NO_AUTO_VECTORIZE]), *_INCLUDES, *runtime]

    def half_helpers(self, dtype: str) -> dict[str, str]:
        return _HALF[dtype]

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
