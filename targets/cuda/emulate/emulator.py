"""Build CUDA kernel source for the CPU (g++ with `cuda_emulate.h`) and launch its kernels.

The emulated library exports, for each kernel entry `E`:

    int tunehub_emu_launch_E(const unsigned *grid, const unsigned *block, size_t shared,
                             void **params);

with `params` packed exactly as `cuLaunchKernel`'s `kernelParams` (one pointer to each
argument's value), so the runner packs arguments one way for the GPU and for the emulator;
`const char *tunehub_emu_error(void)` says why a launch returned non-zero.

One rewrite happens before compiling: `extern __shared__ T name[];` becomes a pointer to the
launch's dynamic shared memory (C++ cannot bind an unsized extern array to a buffer chosen at
run time). Everything else is the header's business.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tunehub.compiler.kernel import Kernel
from tunehub.schemas.target import Target
from tunehub.worker.build.builder import Builder, BuildResult, build_shared_library

HERE = Path(__file__).resolve().parent
HEADER = HERE / "cuda_emulate.h"
STUBS = HERE / "stubs"  # empty stand-ins for <cuda_fp16.h>, <mma.h>, ...
COMPILER = "g++"
# -O1: compile time dominates the small launches tests make. Unknown pragmas: `#pragma unroll`.
# No unique symbols: one in a kernel (a static in an inline function) would make the library
# impossible to unload and share its object with every other library of the process.
FLAGS = (
    "-fno-gnu-unique",
    "-std=c++20",
    "-O1",
    "-shared",
    "-fPIC",
    "-Wno-unknown-pragmas",
    "-fno-math-errno",
)
LAUNCH_PREFIX = "tunehub_emu_launch_"

_DYNAMIC_SHARED = re.compile(
    r"extern\s+__shared__\s+(?P<type>[^;\[\]]*?)\s*\b(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*;"
)
_ALIGN = re.compile(r"__align__\s*\(\s*\d+\s*\)")


class EmulationError(RuntimeError):
    """A launch the emulator refused or could not finish (bad dimensions, a deadlock)."""


def emulation_source(source: str, entries: Sequence[str]) -> str:
    """`source` with dynamic shared memory rewritten and a launcher appended per entry."""

    def pointer(match: re.Match[str]) -> str:
        ctype = " ".join(_ALIGN.sub(" ", match["type"]).split())
        name = match["name"]
        return f"{ctype} *{name} = reinterpret_cast<{ctype} *>(::cuda_emu::dynamic_shared());"

    launchers = [
        f'extern "C" int {LAUNCH_PREFIX}{entry}(const unsigned *grid, const unsigned *block,\n'
        f"    unsigned long long shared, void **params) {{\n"
        f"  return ::cuda_emu::launch(&{entry}, grid, block, shared, params);\n}}\n"
        for entry in dict.fromkeys(entries)
    ]
    error = 'extern "C" const char *tunehub_emu_error(void) { return ::cuda_emu::error; }\n'
    return "\n".join([_DYNAMIC_SHARED.sub(pointer, source), "", *launchers, error])


def entries_of(kernel: Kernel) -> list[str]:
    """The kernel functions a lowered CUDA kernel launches (its entry when it names none)."""
    kernels = kernel.launch.get("kernels") or [{"entry": kernel.entry}]
    return [k["entry"] for k in kernels]


class EmulatedBuilder(Builder):
    """CUDA source -> a shared library that runs its kernels on the CPU (no GPU involved)."""

    def build(self, kernel: Kernel, target: Target, timeout_s: float) -> BuildResult:
        if kernel.language != "cuda" or target.kind != "cuda":
            raise ValueError(f"EmulatedBuilder builds CUDA kernels, not {kernel.language}")
        return build_library(kernel.source, entries_of(kernel), timeout_s)


def build_library(source: str, entries: Sequence[str], timeout_s: float) -> BuildResult:
    """Compile CUDA `source` with the emulation header; the artifact is the .so."""
    flags = [*FLAGS, "-I", str(STUBS), "-include", str(HEADER)]
    stats = {"compiler": COMPILER, "flags": list(FLAGS), "emulated": True}
    return build_shared_library(
        emulation_source(source, entries),
        "kernel.cu",
        [COMPILER, *flags, "-x", "c++"],
        timeout_s,
        stats,
    )


def pack_params(values: Sequence[Any]) -> tuple[ctypes.Array[ctypes.c_void_p], list[Any]]:
    """`kernelParams` for ctypes scalars `values`: an array of pointers to each value.

    The second item keeps the values alive; the array is only valid while it lives.
    """
    array = (ctypes.c_void_p * max(1, len(values)))()
    for i, value in enumerate(values):
        array[i] = ctypes.addressof(value)
    return array, list(values)


class Library:
    """An emulation library loaded into this process (see `build_library`)."""

    def __init__(self, path: str | Path) -> None:
        self.lib = ctypes.CDLL(str(path))
        self.lib.tunehub_emu_error.restype = ctypes.c_char_p

    def launcher(self, entry: str) -> Any:
        """The library's launcher of kernel `entry` (AttributeError if it has none)."""
        fn = getattr(self.lib, LAUNCH_PREFIX + entry)
        fn.restype = ctypes.c_int
        return fn

    def launch(
        self,
        entry: str,
        grid: Sequence[int],
        block: Sequence[int],
        shared_bytes: int,
        params: Sequence[Any],
    ) -> None:
        """Run kernel `entry` to completion; EmulationError if the launch was refused."""
        dims = ctypes.c_uint * 3
        array, _values = pack_params(params)
        code = self.launcher(entry)(
            dims(*grid), dims(*block), ctypes.c_ulonglong(shared_bytes), array
        )
        if code != 0:
            message = (self.lib.tunehub_emu_error() or b"").decode(errors="replace")
            raise EmulationError(f"launch of {entry} failed: {message}")
