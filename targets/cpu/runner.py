"""Measure CPU kernels (.so files) in a sandboxed child process through ctypes."""

from __future__ import annotations

from typing import ClassVar

from tunehub.worker.measure.sandboxed import SandboxedRunner


class CpuRunner(SandboxedRunner):
    """Runs kernels with `threads` OpenMP threads in `targets.cpu.child`."""

    child: ClassVar[str] = "tunehub.targets.cpu.child"
    backend: ClassVar[str] = "cpu"
    suffix: ClassVar[str] = ".so"

    def __init__(self, threads: int) -> None:
        self.threads = threads
        # numpy's BLAS threads would only compete with the kernel's OpenMP threads.
        super().__init__({"OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": "1"})
