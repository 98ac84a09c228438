"""Build C kernels into shared objects with gcc (OpenMP on, ISA flags from the target)."""

from __future__ import annotations

from compiler.kernel import Kernel
from schemas.target import Target
from worker.build.builder import Builder, BuildResult, build_shared_library

# x86-64-v4 is AVX-512 F/BW/CD/DQ/VL on top of v3 (AVX2, FMA, BMI); -mtune=native schedules
# for the worker's own core, which is where the artifact is measured.
ISA_FLAGS: dict[str, tuple[str, ...]] = {
    "x86_64-avx512": ("-march=x86-64-v4", "-mtune=native"),
    "x86_64-avx2": ("-march=x86-64-v3", "-mtune=native"),
    "x86_64": ("-march=x86-64", "-mtune=generic"),
    "aarch64-neon": ("-march=armv8-a+simd", "-mtune=native"),
    "generic": (),
}
# Kernels never read errno or rely on FP traps; without both, gcc keeps sqrt/floor/ceil out
# of vectorized loops. Neither changes a computed value (unlike -ffast-math).
BASE_FLAGS = ("-O3", "-fopenmp", "-shared", "-fPIC", "-fno-math-errno", "-fno-trapping-math")


class CpuBuilder(Builder):
    compiler = "gcc"

    def build(self, kernel: Kernel, target: Target, timeout_s: float) -> BuildResult:
        if kernel.language != "c" or target.kind != "cpu" or target.isa not in ISA_FLAGS:
            raise ValueError(f"CpuBuilder builds C kernels for CPU targets, not {target}")
        flags = [*BASE_FLAGS, *ISA_FLAGS[target.isa]]
        stats = {"compiler": self.compiler, "flags": flags}
        return build_shared_library(
            kernel.source, "kernel.c", [self.compiler, *flags], timeout_s, stats, ["-lm"]
        )
