"""A lowered kernel: its source and everything needed to call it (the calling convention
`metadata` describes is `runtime.abi`'s)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tunehub.compiler.ir import Extent


@dataclass(frozen=True)
class KernelArg:
    name: str
    shape: tuple[Extent, ...]
    dtype: str
    role: Literal["input", "output"]


@dataclass(frozen=True)
class Kernel:
    language: str  # the target kind's (`CompilerBackend.language`): "c", "cuda"
    source: str
    entry: str
    args: tuple[KernelArg, ...]
    symbols: tuple[str, ...]
    # CUDA only: the kernels to launch and the workspaces to allocate (`runtime.abi`).
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
