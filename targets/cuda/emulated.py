"""Run CUDA kernels on the CPU through the emulator, through the GPU runner's verification.

`EmulatedRunner` measures artifacts of `targets.cuda.emulate.EmulatedBuilder` (CUDA source built
by g++ with `cuda_emulate.h`) in the same sandboxed child as the GPU runner, so launch
metadata, argument packing, poisoning, guard bytes and the comparison with the reference are
exercised on machines without a GPU. It reports no latencies: an emulated kernel's speed says
nothing about the GPU's.
"""

from __future__ import annotations

import _ctypes
import ctypes
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from tunehub.targets.cuda.emulate.emulator import EmulationError, Library
from tunehub.targets.cuda.runner import CudaRunner
from tunehub.targets.cuda.tensor_map import Encoded, TensorMap, emulated

ALIGN = 256  # as cuMemAlloc's pointers


class EmulatedRunner(CudaRunner):
    backend: ClassVar[str] = "emulated"
    suffix: ClassVar[str] = ".so"


class Emulator:
    """The child's device when emulating: host memory, kernels run by the emulation library."""

    timed = False
    errors: tuple[type[Exception], ...] = (EmulationError,)

    def __init__(self) -> None:
        self.library: Library | None = None
        self.buffers: list[np.ndarray] = []

    def load(self, artifact: str, kernels: Sequence[dict[str, Any]]) -> None:
        self.library = Library(artifact)
        for kernel in kernels:
            self.library.launcher(kernel["entry"])  # a missing entry fails here, not mid-run

    def alloc(self, nbytes: int) -> int:
        raw = np.empty(nbytes + ALIGN, np.uint8)
        self.buffers.append(raw)
        return raw.ctypes.data + (-raw.ctypes.data) % ALIGN

    def write(self, address: int, data: np.ndarray) -> None:
        ctypes.memmove(address, data.ctypes.data, data.nbytes)

    def read(self, address: int, out: np.ndarray) -> None:
        ctypes.memmove(out.ctypes.data, address, out.nbytes)

    def tensor_map(self, tensor_map: TensorMap, address: int) -> Encoded:
        return emulated(tensor_map, address)

    def launch(
        self,
        entry: str,
        grid: Sequence[int],
        block: Sequence[int],
        shared_bytes: int,
        params: Sequence[Any],
    ) -> None:
        assert self.library is not None
        self.library.launch(entry, grid, block, shared_bytes, params)

    def synchronize(self) -> None:
        """Launches run to completion: nothing is pending."""

    def time_calls(self, call: Callable[[], None], number: int) -> float:
        raise NotImplementedError("the emulator does not time kernels")

    def release(self) -> None:
        if self.library is not None:
            _ctypes.dlclose(self.library.lib._handle)  # the next candidate's statics start fresh
        self.library = None
        self.buffers = []
