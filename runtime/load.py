"""`load_kernel(dir)(*inputs, **symbols)`: call an exported kernel, or a dispatch directory of
several, from Python."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tunehub.runtime.directory import load_single
from tunehub.runtime.dispatch import DISPATCH, load_dispatch


def load_kernel(directory: str | Path) -> Any:
    """Load the kernel exported into `directory` by `tunehub kernel` or `tunehub download`
    (or the dispatch over several kernels that `dispatch.json` describes there): a CPU
    kernel takes numpy arrays, a CUDA kernel device arrays (torch, cupy)."""
    directory = Path(directory)
    if (directory / DISPATCH).is_file():
        return load_dispatch(directory)
    return load_single(directory)
