"""Compilation targets: a CUDA architecture or a CPU instruction set."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

CPU_ISAS = ("x86_64-avx512", "x86_64-avx2", "x86_64", "aarch64-neon", "generic")
CUDA_ARCH_PATTERN = re.compile(r"^sm_[0-9]{2,3}a?$")


class Target(BaseModel):
    """`{"kind": "cuda", "arch": "sm_90"}` or `{"kind": "cpu", "isa": "x86_64-avx512"}`.

    `arch`/`isa` may be left out in a request, meaning "whatever the workers of that kind have";
    every stored record names a complete target.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["cuda", "cpu"]
    arch: str | None = None
    isa: str | None = None

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> Target:
        if self.kind == "cuda":
            if self.isa is not None:
                raise ValueError("a cuda target has an arch, not an isa")
            if self.arch is not None and not CUDA_ARCH_PATTERN.match(self.arch):
                raise ValueError(f"unknown cuda arch {self.arch!r} (expected e.g. 'sm_90')")
        else:
            if self.arch is not None:
                raise ValueError("a cpu target has an isa, not an arch")
            if self.isa is not None and self.isa not in CPU_ISAS:
                raise ValueError(f"unknown cpu isa {self.isa!r} (one of {', '.join(CPU_ISAS)})")
        return self

    @classmethod
    def parse(cls, text: str) -> Target:
        """Parse the short form used on the command line and in queries: `cpu`,
        `cpu:x86_64-avx512`, `cuda`, `cuda:sm_90`."""
        kind, _, detail = text.strip().partition(":")
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"unknown target {text!r} (expected cpu[:ISA] or cuda[:sm_XX])")
        if kind == "cpu":
            return cls(kind="cpu", isa=detail or None)
        return cls(kind="cuda", arch=detail or None)

    @property
    def complete(self) -> bool:
        return (self.arch if self.kind == "cuda" else self.isa) is not None

    def __str__(self) -> str:
        detail = self.arch if self.kind == "cuda" else self.isa
        return f"{self.kind}:{detail}" if detail else self.kind
