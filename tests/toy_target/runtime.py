"""The toy target's runtime facet: its libraries follow the C ABI, so the CPU's ctypes
loader calls them."""

from __future__ import annotations

from tunehub.targets.cpu.runtime import CpuRuntime


class ToyRuntime(CpuRuntime):
    language = "toyc"
    source = "kernel.toyc"


BACKEND = ToyRuntime()
