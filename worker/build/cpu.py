"""Build C kernels into shared objects with gcc (OpenMP on, ISA flags from the target)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from compiler.kernel import Kernel
from schemas.record import RecordStatus
from schemas.target import Target
from worker.build.builder import Builder, BuildResult, run_compiler, truncate

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
        with tempfile.TemporaryDirectory(prefix="tunehub-build-") as tmp:
            Path(tmp, "kernel.c").write_text(kernel.source)
            # Relative paths, so the log reads `kernel.c:12:5: error: ...`.
            command = [self.compiler, *flags, "-o", "kernel.so", "kernel.c", "-lm"]
            start = time.perf_counter()
            status, log = run_compiler(command, timeout_s, cwd=tmp)
            elapsed = time.perf_counter() - start
            if status is not RecordStatus.OK:
                return BuildResult(status, elapsed, truncate(log))
            artifact = Path(tmp, "kernel.so").read_bytes()
        stats = {"compiler": self.compiler, "flags": flags, "artifact_bytes": len(artifact)}
        return BuildResult.success(artifact, elapsed, log, stats)
