"""A lowered kernel: its source and everything needed to call it.

C ABI (CPU): `int ENTRY(const T0* in0, ..., T* out0, ..., int64_t sym0, ...)` with the
arguments in `args` order, then one int64 per symbol in `symbols` order. It returns 0, or
non-zero when it could not run (e.g. a workspace allocation failed). Every buffer is
row-major and contiguous. float16 and bfloat16 travel as their 16-bit patterns, bool as one
byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from compiler.ir import Extent


@dataclass(frozen=True)
class KernelArg:
    name: str
    shape: tuple[Extent, ...]
    dtype: str
    role: Literal["input", "output"]


@dataclass(frozen=True)
class Kernel:
    language: Literal["c", "cuda"]
    source: str
    entry: str
    args: tuple[KernelArg, ...]
    symbols: tuple[str, ...]
    # CUDA only: grid/block (as expressions of the symbols), dynamic shared memory.
    launch: dict[str, Any] = field(default_factory=dict)

    def metadata(self) -> dict[str, Any]:
        """The JSON document shipped beside every artifact (`metadata.json`)."""
        return {
            "language": self.language,
            "entry": self.entry,
            "args": [
                {"name": a.name, "shape": list(a.shape), "dtype": a.dtype, "role": a.role}
                for a in self.args
            ],
            "symbols": list(self.symbols),
            "launch": self.launch,
        }
