"""Kernel directories: what `tunehub kernel` and `tunehub download` write for one kernel, and
reading one back. A directory holds `metadata.json` (the `runtime.abi` description), the
artifact and its source under the names its target's runtime facet gives (`kernel.so` and
`kernel.c` for CPUs, `kernel.cubin` and `kernel.cu` for CUDA) and any sidecar files
(`kernel.ptx`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunehub.runtime.backend import RuntimeBackend, runtime_backend

METADATA = "metadata.json"


def save_kernel(
    directory: str | Path, artifact: bytes, source: str | None, metadata: dict[str, Any]
) -> Path:
    """Write a kernel directory that `load_single` reads back (created if needed). Sidecar
    entries of `metadata` (a CUDA kernel's `ptx`) go to their own files, not into the JSON."""
    directory = Path(directory)
    backend = _backend(metadata, directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / backend.artifact).write_bytes(artifact)
    if source is not None:
        (directory / backend.source).write_text(source)
    metadata = dict(metadata)
    for key, name in backend.sidecars.items():
        value = metadata.pop(key, None)
        if value is not None:
            (directory / name).write_text(value)
    (directory / METADATA).write_text(json.dumps(metadata, indent=2) + "\n")
    return directory


def load_single(directory: str | Path) -> Any:
    """The kernel exported into `directory`, loaded by its target's runtime facet."""
    directory = Path(directory)
    metadata = read_metadata(directory)
    backend = _backend(metadata, directory)
    artifact = directory / backend.artifact
    require(artifact)
    return backend.load(artifact.resolve(), metadata)


def read_metadata(directory: Path) -> dict[str, Any]:
    path = directory / METADATA
    require(path)
    metadata: dict[str, Any] = json.loads(path.read_text())
    return metadata


def require(path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found (export a kernel with `tunehub kernel`)")


def _backend(metadata: Mapping[str, Any], directory: Path) -> RuntimeBackend:
    try:
        return runtime_backend(str(metadata.get("language", "c")))
    except ValueError as exc:
        raise ValueError(f"{directory}: {exc}") from None
