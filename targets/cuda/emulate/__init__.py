"""Run CUDA kernel source on the CPU: `cuda_emulate.h` makes it build with g++, `emulator`
builds it and launches its kernels. For checking kernels' logic where no GPU is at hand."""

from tunehub.targets.cuda.emulate.emulator import (
    HEADER,
    EmulatedBuilder,
    EmulationError,
    Library,
    build_library,
)

__all__ = ["HEADER", "EmulatedBuilder", "EmulationError", "Library", "build_library"]
