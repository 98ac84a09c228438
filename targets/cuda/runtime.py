"""Loading a CUDA kernel: a cubin launched on device arrays (`targets.cuda.kernel`), with
cuda-python imported only when it is first called."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from tunehub.runtime.backend import RuntimeBackend
from tunehub.targets.cuda.kernel import CudaKernel


class CudaRuntime(RuntimeBackend):
    language = "cuda"
    artifact = "kernel.cubin"
    source = "kernel.cu"
    sidecars: ClassVar[Mapping[str, str]] = {"ptx": "kernel.ptx"}
    torch_device = "cuda"

    def load(self, artifact: Path, metadata: dict[str, Any]) -> CudaKernel:
        return CudaKernel(artifact.read_bytes(), metadata)


BACKEND = CudaRuntime()
