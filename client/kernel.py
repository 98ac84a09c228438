"""Call an exported kernel from Python: `load_kernel(dir)(*inputs, **symbols)`.

`tunehub kernel` and `tunehub download` write a directory with the artifact and
`metadata.json`: `kernel.so` (+ `kernel.c`) for a CPU kernel, which this module calls with
numpy arrays and needs only numpy and ml_dtypes for; `kernel.cubin` (+ `kernel.cu`, and
`kernel.ptx` where the exporter had it) for a CUDA kernel, which `client.cuda_kernel` launches
on device arrays through cuda-python (imported only then). A directory with `dispatch.json`
is a set of kernels chosen by shape (`client.dispatch`).

The C ABI (see `compiler.kernel`): `int ENTRY(inputs..., outputs..., int64_t symbols...)`,
row-major contiguous buffers, float16/bfloat16 as their 16-bit patterns (numpy float16 and
ml_dtypes.bfloat16 arrays have exactly that layout), a non-zero return on failure.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

if TYPE_CHECKING:
    from client.cuda_kernel import CudaKernel

LIBRARY = "kernel.so"
SOURCE = "kernel.c"
CUBIN = "kernel.cubin"
CUDA_SOURCE = "kernel.cu"
PTX = "kernel.ptx"
METADATA = "metadata.json"
DISPATCH = "dispatch.json"
# The artifact and source file of each kernel language.
FILES = {"c": (LIBRARY, SOURCE), "cuda": (CUBIN, CUDA_SOURCE)}


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype holding values of a signature dtype (bfloat16 through ml_dtypes)."""
    if dtype == "bfloat16":
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


@dataclass(frozen=True)
class Arg:
    name: str
    shape: tuple[int | str, ...]
    dtype: str  # a signature dtype: float32, float16, bfloat16, uint32, ...

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"


class Arguments:
    """The arguments of an exported kernel (from its metadata) and the checks every loader
    makes of a call, so CPU and CUDA kernels accept and refuse exactly the same calls."""

    def __init__(self, metadata: Mapping[str, Any]) -> None:
        args = [
            (Arg(a["name"], tuple(a["shape"]), a["dtype"]), a["role"]) for a in metadata["args"]
        ]
        self.inputs = [a for a, role in args if role == "input"]
        self.outputs = [a for a, role in args if role == "output"]
        self.symbols: list[str] = list(metadata.get("symbols", []))

    def __str__(self) -> str:
        return f"({', '.join(map(str, self.inputs))}) -> ({', '.join(map(str, self.outputs))})"

    def check_count(self, inputs: Sequence[Any]) -> None:
        if len(inputs) != len(self.inputs):
            names = ", ".join(a.name for a in self.inputs)
            raise ValueError(f"expected {len(self.inputs)} inputs ({names}), got {len(inputs)}")

    def bind(
        self, inputs: Sequence[tuple[tuple[int, ...], str]], given: Mapping[str, int]
    ) -> dict[str, int]:
        """Every symbol's value, from `given` and the inputs' (shape, dtype) in signature
        order, which must match the signature; ValueError with a message naming the input."""
        self.check_count(inputs)
        unknown = set(given) - set(self.symbols)
        if unknown:
            raise ValueError(f"unknown symbols: {', '.join(sorted(unknown))}")
        values = dict(given)
        for arg, (shape, dtype) in zip(self.inputs, inputs, strict=True):
            if dtype != arg.dtype:
                raise ValueError(f"input {arg.name!r} must have dtype {arg.dtype}, got {dtype}")
            _bind_shape(f"input {arg.name!r}", arg.shape, shape, values)
        missing = [s for s in self.symbols if s not in values]
        if missing:
            raise ValueError(
                f"symbols {', '.join(missing)} appear in no input: pass them as keywords"
            )
        return values

    def output_shapes(self, symbols: Mapping[str, int]) -> list[tuple[int, ...]]:
        return [tuple(_extent(e, symbols) for e in arg.shape) for arg in self.outputs]


def _bind_shape(
    what: str, want: tuple[int | str, ...], got: tuple[int, ...], symbols: dict[str, int]
) -> None:
    """Check `got` against `want`, binding the symbols `want` names that are still unbound."""
    if len(got) != len(want):
        raise ValueError(
            f"{what} must have rank {len(want)} (shape {list(want)}), got shape {list(got)}"
        )
    for axis, (extent, size) in enumerate(zip(want, got, strict=True)):
        if isinstance(extent, str):
            bound = symbols.setdefault(extent, size)
            if bound != size:
                raise ValueError(
                    f"{what} axis {axis} is {extent}={size}, but {extent}={bound} elsewhere"
                )
        elif extent != size:
            raise ValueError(f"{what} must have shape {list(want)}, got {list(got)}")


def _extent(extent: int | str, symbols: Mapping[str, int]) -> int:
    return extent if isinstance(extent, int) else symbols[extent]


class CompiledKernel:
    """A loaded CPU kernel. Symbols are inferred from the inputs' shapes; pass them as keywords
    only when they appear in no input shape (passing them anyway is allowed and checked)."""

    def __init__(self, library: Path, metadata: dict[str, Any]) -> None:
        if metadata.get("language", "c") != "c":
            raise ValueError(f"{library.parent}: not a CPU kernel ({metadata['language']!r})")
        self.metadata = metadata
        self.entry: str = metadata["entry"]
        self.arguments = Arguments(metadata)
        self.inputs, self.outputs = self.arguments.inputs, self.arguments.outputs
        self.symbols = self.arguments.symbols
        self._lib = ctypes.CDLL(str(library))
        self._fn = getattr(self._lib, self.entry)
        self._fn.restype = ctypes.c_int
        buffers = len(self.inputs) + len(self.outputs)
        self._fn.argtypes = [ctypes.c_void_p] * buffers + [ctypes.c_int64] * len(self.symbols)

    def __repr__(self) -> str:
        return f"<CompiledKernel {self.entry}{self.arguments}>"

    def __call__(self, *inputs: Any, **symbols: int) -> np.ndarray | tuple[np.ndarray, ...]:
        """Run the kernel on `inputs` (in signature order); one output array, or a tuple.
        A non-contiguous input is copied first."""
        self.arguments.check_count(inputs)
        arrays = [
            x if isinstance(x, np.ndarray) else np.asarray(x, dtype=numpy_dtype(arg.dtype))
            for arg, x in zip(self.inputs, inputs, strict=True)
        ]
        values = self.arguments.bind([(a.shape, a.dtype.name) for a in arrays], symbols)
        arrays = [np.ascontiguousarray(a) for a in arrays]
        outputs = [
            np.empty(shape, dtype=numpy_dtype(arg.dtype))
            for arg, shape in zip(self.outputs, self.arguments.output_shapes(values), strict=True)
        ]
        pointers = [a.ctypes.data_as(ctypes.c_void_p) for a in (*arrays, *outputs)]
        status = self._fn(*pointers, *(values[s] for s in self.symbols))
        if status != 0:
            raise RuntimeError(f"kernel {self.entry} failed with status {status}")
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def save_kernel(
    directory: str | Path, library: bytes, source: str | None, metadata: dict[str, Any]
) -> Path:
    """Write a kernel directory that `load_kernel` reads back (created if needed): the artifact
    and source under their language's names (`FILES`), and `metadata.json`. A `ptx` entry of
    `metadata` (CUDA) goes to `kernel.ptx` instead of into the JSON."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    artifact_name, source_name = FILES[_language(metadata, directory)]
    (directory / artifact_name).write_bytes(library)
    if source is not None:
        (directory / source_name).write_text(source)
    metadata = dict(metadata)
    ptx = metadata.pop("ptx", None)
    if ptx is not None:
        (directory / PTX).write_text(ptx)
    (directory / METADATA).write_text(json.dumps(metadata, indent=2) + "\n")
    return directory


def load_kernel(directory: str | Path) -> CompiledKernel | CudaKernel | Callable[..., Any]:
    """Load the kernel exported into `directory` by `tunehub kernel` or `tunehub download`
    (or the dispatch over several kernels that `dispatch.json` describes there)."""
    directory = Path(directory)
    if (directory / DISPATCH).is_file():
        from client.dispatch import load_dispatch

        return load_dispatch(directory)
    meta_path = directory / METADATA
    _require(meta_path)
    metadata = json.loads(meta_path.read_text())
    language = _language(metadata, directory)
    artifact = directory / FILES[language][0]
    _require(artifact)
    if language == "cuda":
        from client.cuda_kernel import CudaKernel

        return CudaKernel(artifact.read_bytes(), metadata)
    return CompiledKernel(artifact.resolve(), metadata)


def _language(metadata: Mapping[str, Any], directory: Path) -> str:
    language = metadata.get("language", "c")
    if language not in FILES:
        raise ValueError(f"{directory}: unknown kernel language {language!r}")
    return str(language)


def _require(path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found (export a kernel with `tunehub kernel`)")
