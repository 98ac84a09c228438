"""Build C kernels into shared objects with gcc (OpenMP on, ISA flags from the target)."""

from __future__ import annotations

from tunehub.compiler.kernel import Kernel
from tunehub.schemas.target import Target
from tunehub.worker.build.builder import Builder, BuildResult, build_shared_library

# x86-64-v4 is AVX-512 F/BW/CD/DQ/VL on top of v3 (AVX2, FMA, BMI); -mtune=native schedules
# for the worker's own core, which is where the artifact is measured.
ISA_FLAGS: dict[str, tuple[str, ...]] = {
    "x86_64-avx512": ("-march=x86-64-v4", "-mtune=native"),
    "x86_64-avx2": ("-march=x86-64-v3", "-mtune=native"),
    "x86_64": ("-march=x86-64", "-mtune=generic"),
    "aarch64-neon": ("-march=armv8-a+simd", "-mtune=native"),
    "generic": (),
}
# Each feature an ISA names adds its instructions (`schemas.target.CPU_FEATURES`).
FEATURE_FLAGS: dict[str, tuple[str, ...]] = {
    "avx_vnni": ("-mavxvnni",),
    "avx512_vnni": ("-mavx512vnni",),
    "avx512_bf16": ("-mavx512bf16",),
    "avx512_fp16": ("-mavx512fp16",),
    "amx_tile": ("-mamx-tile",),
    "amx_bf16": ("-mamx-bf16",),
    "amx_int8": ("-mamx-int8",),
}
# Kernels never read errno or rely on FP traps; without both, gcc keeps sqrt/floor/ceil out
# of vectorized loops. Neither changes a computed value (unlike -ffast-math). A kernel's only
# external function is its entry, which takes pointers and integers: the vector-passing ABI
# of its static helpers (which -Wpsabi warns about where a vector is wider than the ISA's
# registers, e.g. 8 floats on plain x86-64) is nobody's concern.
BASE_FLAGS = (
    "-O3",
    "-fopenmp",
    "-shared",
    "-fPIC",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-Wno-psabi",
)


class CpuBuilder(Builder):
    compiler = "gcc"

    def build(self, kernel: Kernel, target: Target, timeout_s: float) -> BuildResult:
        if kernel.language != "c" or target.kind != "cpu" or target.base not in ISA_FLAGS:
            raise ValueError(f"CpuBuilder builds C kernels for CPU targets, not {target}")
        flags = [*BASE_FLAGS, *isa_flags(target)]
        stats = {"compiler": self.compiler, "flags": flags}
        return build_shared_library(
            kernel.source, "kernel.c", [self.compiler, *flags], timeout_s, stats, ["-lm"]
        )


def isa_flags(target: Target) -> list[str]:
    """gcc's flags for a CPU target: its base ISA's, then each of its features'."""
    return [*ISA_FLAGS[str(target.base)], *(f for x in target.features for f in FEATURE_FLAGS[x])]
