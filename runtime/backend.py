"""What the runtime asks of a target kind: the files of its exported kernels and how to load
one. Each kind's `runtime` facet (`tunehub.targets.<kind>.runtime.BACKEND`) implements this,
importing nothing but the runtime (a client that loads CPU kernels needs numpy alone)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from tunehub.schemas.target import kind_of, kinds


class RuntimeBackend(ABC):
    language: str  # the `language` of the kernels it loads (`metadata.json`)
    artifact: str  # the artifact's file name in a kernel directory, e.g. "kernel.so"
    source: str  # the source's file name, e.g. "kernel.c"
    # Metadata entries kept in files of their own beside it, e.g. {"ptx": "kernel.ptx"}.
    sidecars: ClassVar[Mapping[str, str]] = {}
    # The torch device type whose tensors its kernels take (None: numpy arrays in host memory).
    torch_device: str | None = None

    @property
    def artifact_kind(self) -> str:
        """The artifact's kind as stored with a record: its file extension (`so`, `cubin`)."""
        return self.artifact.rpartition(".")[2]

    @abstractmethod
    def load(self, artifact: Path, metadata: dict[str, Any]) -> Any:
        """The callable kernel of an artifact file (`metadata` says how to call it)."""


def runtime_backend(language: str) -> RuntimeBackend:
    """The runtime facet of the target kind whose kernels are written in `language`."""
    for kind in kinds().values():
        backend: RuntimeBackend = kind.facet("runtime")
        if backend.language == language:
            return backend
    raise ValueError(f"unknown kernel language {language!r}")


def target_runtime(kind: str) -> RuntimeBackend:
    """The runtime facet of target kind `kind`."""
    backend: RuntimeBackend = kind_of(kind).facet("runtime")
    return backend
