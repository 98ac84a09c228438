"""Measure CUDA kernels in a sandboxed child: cubins on this machine's GPU (`CudaRunner`).

The parent side only: it never imports cuda-python and never touches the GPU, so the worker
daemon can fork and serve queues with no CUDA context in it. The child
(`targets.cuda.child`) is a fresh interpreter that creates the context, loads the
cubin, verifies and times it; a faulting kernel poisons only that child's context and a
hanging one is killed at the deadline, and either way the next candidate gets a new child.
`targets.cuda.emulated.EmulatedRunner` is the same runner on the CPU emulator.
"""

from __future__ import annotations

from typing import ClassVar

from tunehub.worker.measure.sandboxed import SandboxedRunner


class CudaRunner(SandboxedRunner):
    """Runs cubins on the first visible GPU (choose one with CUDA_VISIBLE_DEVICES)."""

    child: ClassVar[str] = "tunehub.targets.cuda.child"
    backend: ClassVar[str] = "gpu"
    suffix: ClassVar[str] = ".cubin"

    def __init__(self) -> None:
        super().__init__({"OPENBLAS_NUM_THREADS": "1"})
