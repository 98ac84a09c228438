"""Loading a CPU kernel: a shared library called through ctypes with numpy arrays.

The C ABI (`runtime.abi`): `int ENTRY(inputs..., outputs..., int64_t symbols...)`, row-major
contiguous buffers, float16/bfloat16 as their 16-bit patterns (numpy float16 and
ml_dtypes.bfloat16 arrays have exactly that layout), a non-zero return on failure.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tunehub.runtime.arguments import Arguments, numpy_dtype
from tunehub.runtime.backend import RuntimeBackend

# Linux's arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): the process asks for AMX's tile
# data state, without which its first tile instruction is killed (SIGILL).
_SYS_ARCH_PRCTL = 158  # x86-64
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


@cache
def allow_tiles() -> bool:
    """Ask Linux for the AMX tile state for this process (all its threads), once, before a
    kernel that may use tiles is loaded; whether it was granted (False where the CPU or the
    kernel has none: such a host never runs an AMX kernel, `worker.device.can_run`)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


class CompiledKernel:
    """A loaded CPU kernel. Symbols are inferred from the inputs' shapes; pass them as keywords
    only when they appear in no input shape (passing them anyway is allowed and checked)."""

    def __init__(self, library: Path, metadata: dict[str, Any]) -> None:
        self.metadata = metadata
        self.entry: str = metadata["entry"]
        self.arguments = Arguments(metadata)
        self.inputs, self.outputs = self.arguments.inputs, self.arguments.outputs
        self.symbols = self.arguments.symbols
        allow_tiles()
        self._lib = ctypes.CDLL(str(library))
        self._fn = getattr(self._lib, self.entry)
        self._fn.restype = ctypes.c_int
        buffers = len(self.inputs) + len(self.outputs)
        self._fn.argtypes = [ctypes.c_void_p] * buffers + [ctypes.c_int64] * len(self.symbols)

    def __repr__(self) -> str:
        return f"<CompiledKernel {self.entry}{self.arguments}>"

    def __call__(self, *inputs: Any, **symbols: int) -> np.ndarray | tuple[np.ndarray, ...]:
        """Run the kernel on `inputs` (in signature order); one output array, or a tuple.
        A non-contiguous input is copied first."""
        self.arguments.check_count(inputs)
        arrays = [
            x if isinstance(x, np.ndarray) else np.asarray(x, dtype=numpy_dtype(arg.dtype))
            for arg, x in zip(self.inputs, inputs, strict=True)
        ]
        values = self.arguments.bind([(a.shape, a.dtype.name) for a in arrays], symbols)
        arrays = [np.ascontiguousarray(a) for a in arrays]
        outputs = [
            np.empty(shape, dtype=numpy_dtype(arg.dtype))
            for arg, shape in zip(self.outputs, self.arguments.output_shapes(values), strict=True)
        ]
        self.launch([a.ctypes.data for a in (*arrays, *outputs)], values)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def launch(self, pointers: Sequence[int], symbols: Mapping[str, int]) -> None:
        """Run on buffers given by address (inputs, then outputs, in signature order), with
        every symbol's value: no checks and no copies, for callers that hold the buffers
        already checked (`tunehub.torch` passes tensors' `data_ptr()`)."""
        status = self._fn(*pointers, *(symbols[s] for s in self.symbols))
        if status != 0:
            raise RuntimeError(f"kernel {self.entry} failed with status {status}")


class CpuRuntime(RuntimeBackend):
    language = "c"
    artifact = "kernel.so"
    source = "kernel.c"

    def load(self, artifact: Path, metadata: dict[str, Any]) -> CompiledKernel:
        return CompiledKernel(artifact, metadata)


BACKEND = CpuRuntime()
