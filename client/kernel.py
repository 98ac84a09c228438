"""Call an exported CPU kernel from Python: `load_kernel(dir)(*inputs, **symbols)`.

`tunehub kernel` writes a directory with `kernel.so`, `kernel.c` and `metadata.json`; this module
needs only numpy and ml_dtypes to use it, so an application can ship the directory without
installing the service or the compiler.

The C ABI (see `compiler.kernel`): `int ENTRY(inputs..., outputs..., int64_t symbols...)`,
row-major contiguous buffers, float16/bfloat16 as their 16-bit patterns (numpy float16 and
ml_dtypes.bfloat16 arrays have exactly that layout), a non-zero return on failure.
"""

from __future__ import annotations

import ctypes
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

LIBRARY = "kernel.so"
SOURCE = "kernel.c"
METADATA = "metadata.json"


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype holding values of a signature dtype (bfloat16 through ml_dtypes)."""
    if dtype == "bfloat16":
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


@dataclass(frozen=True)
class _Arg:
    name: str
    shape: tuple[int | str, ...]
    dtype: np.dtype


class CompiledKernel:
    """A loaded kernel. Symbols are inferred from the inputs' shapes; pass them as keywords only
    when they appear in no input shape (passing them anyway is allowed and checked)."""

    def __init__(self, library: Path, metadata: dict[str, Any]) -> None:
        if metadata.get("language", "c") != "c":
            raise ValueError(
                f"{library.parent}: a {metadata['language']!r} kernel cannot be called "
                "from the host (only CPU kernels can)"
            )
        self.metadata = metadata
        self.entry: str = metadata["entry"]
        args = [
            _Arg(a["name"], tuple(a["shape"]), numpy_dtype(a["dtype"])) for a in metadata["args"]
        ]
        roles = [a["role"] for a in metadata["args"]]
        self.inputs = [a for a, role in zip(args, roles, strict=True) if role == "input"]
        self.outputs = [a for a, role in zip(args, roles, strict=True) if role == "output"]
        self.symbols: list[str] = list(metadata.get("symbols", []))
        self._lib = ctypes.CDLL(str(library))
        self._fn = getattr(self._lib, self.entry)
        self._fn.restype = ctypes.c_int
        self._fn.argtypes = [ctypes.c_void_p] * len(args) + [ctypes.c_int64] * len(self.symbols)

    def __repr__(self) -> str:
        sig = ", ".join(f"{a.name}: {a.dtype}{list(a.shape)}" for a in self.inputs)
        outs = ", ".join(f"{a.name}: {a.dtype}{list(a.shape)}" for a in self.outputs)
        return f"<CompiledKernel {self.entry}({sig}) -> ({outs})>"

    def __call__(self, *inputs: Any, **symbols: int) -> np.ndarray | tuple[np.ndarray, ...]:
        """Run the kernel on `inputs` (in signature order); one output array, or a tuple."""
        if len(inputs) != len(self.inputs):
            names = ", ".join(a.name for a in self.inputs)
            raise ValueError(f"expected {len(self.inputs)} inputs ({names}), got {len(inputs)}")
        unknown = set(symbols) - set(self.symbols)
        if unknown:
            raise ValueError(f"unknown symbols: {', '.join(sorted(unknown))}")
        values = dict(symbols)
        arrays = [
            self._check_input(arg, x, values) for arg, x in zip(self.inputs, inputs, strict=True)
        ]
        missing = [s for s in self.symbols if s not in values]
        if missing:
            raise ValueError(
                f"symbols {', '.join(missing)} appear in no input: pass them as keywords"
            )
        outputs = [
            np.empty(tuple(_extent(e, values) for e in arg.shape), dtype=arg.dtype)
            for arg in self.outputs
        ]
        pointers = [a.ctypes.data_as(ctypes.c_void_p) for a in (*arrays, *outputs)]
        status = self._fn(*pointers, *(values[s] for s in self.symbols))
        if status != 0:
            raise RuntimeError(f"kernel {self.entry} failed with status {status}")
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _check_input(self, arg: _Arg, x: Any, symbols: dict[str, int]) -> np.ndarray:
        """`x` as a contiguous array of `arg`'s dtype; binds the symbols its shape names."""
        if not isinstance(x, np.ndarray):
            x = np.asarray(x, dtype=arg.dtype)
        if x.dtype != arg.dtype:
            raise ValueError(f"input {arg.name!r} must have dtype {arg.dtype}, got {x.dtype}")
        if x.ndim != len(arg.shape):
            raise ValueError(
                f"input {arg.name!r} must have rank {len(arg.shape)} (shape {list(arg.shape)}), "
                f"got shape {list(x.shape)}"
            )
        for axis, (want, got) in enumerate(zip(arg.shape, x.shape, strict=True)):
            if isinstance(want, str):
                bound = symbols.setdefault(want, got)
                if bound != got:
                    raise ValueError(
                        f"input {arg.name!r} axis {axis} is {want}={got}, "
                        f"but {want}={bound} elsewhere"
                    )
            elif want != got:
                raise ValueError(
                    f"input {arg.name!r} must have shape {list(arg.shape)}, got {list(x.shape)}"
                )
        return np.ascontiguousarray(x)


def _extent(extent: int | str, symbols: dict[str, int]) -> int:
    return extent if isinstance(extent, int) else symbols[extent]


def save_kernel(
    directory: str | Path, library: bytes, source: str | None, metadata: dict[str, Any]
) -> Path:
    """Write a kernel directory that `load_kernel` reads back (created if needed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / LIBRARY).write_bytes(library)
    if source is not None:
        (directory / SOURCE).write_text(source)
    (directory / METADATA).write_text(json.dumps(metadata, indent=2) + "\n")
    return directory


def load_kernel(directory: str | Path) -> CompiledKernel:
    """Load the kernel exported into `directory` by `tunehub kernel`."""
    directory = Path(directory)
    library, meta_path = directory / LIBRARY, directory / METADATA
    for path in (library, meta_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found (export a kernel with `tunehub kernel`)")
    return CompiledKernel(library.resolve(), json.loads(meta_path.read_text()))
