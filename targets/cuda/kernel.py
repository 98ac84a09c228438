"""Launch an exported CUDA kernel on device arrays: `load_kernel(dir)(*inputs, **symbols)`.

Inputs are torch tensors, cupy arrays, or any object with `__cuda_array_interface__`; each is
checked (dtype, shape binding the symbols as for CPU kernels, C-contiguity, a 16-byte aligned
device pointer on the same device as the others) before anything runs. Outputs come back as the
inputs' kind: torch tensors for torch inputs (on their device, launched on torch's current
stream), cupy arrays for cupy inputs (cupy's current stream). Other inputs need `out=` buffers,
or cupy to allocate the outputs; they are launched on the stream their interface names (the
legacy default stream without one). `out=` (one buffer, or a sequence in output order) and
`stream=` (a CUstream handle as an int: `torch.cuda.Stream.cuda_stream`,
`cupy.cuda.Stream.ptr`) work with every kind; a kernel symbol can therefore never be named
`out` or `stream`.

The kernels of `metadata["launch"]` run in order on that stream, in the primary context of
the inputs' device (the context torch, cupy and the CUDA runtime use), with workspaces
allocated and freed in stream order (`cuMemAllocAsync`). The call returns at once, as the
frameworks' own operations do. `bind(...)` checks and prepares a call once, to launch it
again and again on the same buffers without the checks' host time. cuda-python is imported
at the first call, so a kernel directory can be loaded and inspected on a machine without it.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunehub.runtime.arguments import Arg, Arguments, numpy_dtype
from tunehub.targets.cuda.launch import (
    Plan,
    check_launch,
    kernel_params,
    launch_plan,
    workspace_bytes,
)
from tunehub.targets.cuda.tensor_map import Encoded, tensor_maps

BUFFER_ALIGN = 16  # every buffer of a call (`runtime.abi`)


@dataclass(frozen=True)
class DeviceArray:
    """What a call needs to know of a device array. `stream`: the stream its
    `__cuda_array_interface__` (v3) says it was produced on, if any."""

    shape: tuple[int, ...]
    dtype: str  # a signature dtype name, or a description of one that is not
    pointer: int
    contiguous: bool
    readonly: bool = False
    stream: int | None = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def device_array(x: Any, what: str) -> DeviceArray:
    """`x` (a torch tensor, or anything with `__cuda_array_interface__`) described; TypeError
    for anything else, such as a numpy array."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        # Not through torch's __cuda_array_interface__, which refuses bfloat16.
        if x.device.type != "cuda":
            raise TypeError(f"{what} is a torch tensor on {x.device}, not on a CUDA device")
        name = str(x.dtype).removeprefix("torch.")
        return DeviceArray(tuple(x.shape), name, x.data_ptr(), x.is_contiguous())
    interface = getattr(x, "__cuda_array_interface__", None)
    if not isinstance(interface, Mapping):
        kind = f"{type(x).__module__}.{type(x).__qualname__}"
        raise TypeError(
            f"{what} is a {kind}: a CUDA kernel takes device arrays "
            "(torch or cupy, or anything with __cuda_array_interface__)"
        )
    shape = tuple(int(n) for n in interface["shape"])
    dtype = np.dtype(interface["typestr"])
    pointer, readonly = interface["data"]
    strides = interface.get("strides")
    contiguous = strides is None or _c_contiguous(shape, tuple(strides), dtype.itemsize)
    name = dtype.name if dtype.isnative else f"{interface['typestr']} (non-native byte order)"
    stream = interface.get("stream")
    return DeviceArray(shape, name, int(pointer or 0), contiguous, bool(readonly), stream)


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    expected = itemsize
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        if size > 1 and stride != expected:
            return False
        expected *= size
    return True


class CudaKernel:
    """A loaded CUDA kernel (cubin and metadata). Called like a CPU kernel; the module doc
    says what it takes and returns."""

    def __init__(self, cubin: bytes, metadata: dict[str, Any]) -> None:
        if metadata.get("language") != "cuda" or "launch" not in metadata:
            raise ValueError("not a CUDA kernel's metadata (no language 'cuda' and launch)")
        check_launch(metadata["launch"])
        self.cubin = cubin
        self.metadata = metadata
        self.entry: str = metadata["entry"]
        self.arguments = Arguments(metadata)
        self.inputs, self.outputs = self.arguments.inputs, self.arguments.outputs
        self.symbols = self.arguments.symbols
        self._modules: dict[int, Any] = {}  # device ordinal -> CudaModule
        self._contexts: dict[int, Any] = {}  # device ordinal -> retained primary context

    def __repr__(self) -> str:
        return f"<CudaKernel {self.entry}{self.arguments}>"

    def plan(self, symbols: Mapping[str, int]) -> Plan:
        """(entry, grid, block, dynamic shared bytes) of each launch at these symbol values."""
        return launch_plan(self.metadata["launch"]["kernels"], symbols)

    def workspace_bytes(self, symbols: Mapping[str, int]) -> list[int]:
        return workspace_bytes(self.metadata["launch"], symbols)

    def __call__(
        self, *inputs: Any, out: Any = None, stream: int | None = None, **symbols: int
    ) -> Any:
        """Launch on `inputs` (in signature order); one output, or a tuple of them."""
        launch = self.bind(*inputs, out=out, stream=stream, **symbols)
        try:
            launch()
        finally:
            launch.close()
        return launch.result

    def bind(
        self, *inputs: Any, out: Any = None, stream: int | None = None, **symbols: int
    ) -> BoundLaunch:
        """A call checked and prepared (outputs and workspaces allocated) to be launched any
        number of times: the checks and allocations of a call cost tens of microseconds of
        host time, which a small kernel called in a loop on the same buffers pays once."""
        self.arguments.check_count(inputs)
        arrays = [
            device_array(x, f"input {arg.name!r}")
            for arg, x in zip(self.inputs, inputs, strict=True)
        ]
        values = self.arguments.bind([(a.shape, a.dtype) for a in arrays], symbols)
        for arg, array in zip(self.inputs, arrays, strict=True):
            _check_buffer(f"input {arg.name!r}", array)
        shapes = self.arguments.output_shapes(values)
        given = None if out is None else self._check_out(out, shapes)
        plan, workspaces = self.plan(values), self.workspace_bytes(values)
        gpu = _driver()
        ordinal = _ordinal(gpu, [*arrays, *(given or [])], self.inputs, self.outputs)
        if given is not None:
            results = list(out) if isinstance(out, list | tuple) else [out]
        else:
            empty = _allocator(inputs[0] if inputs else None, ordinal)
            results = [
                empty(shape, arg.dtype) for arg, shape in zip(self.outputs, shapes, strict=True)
            ]
        pointers = [a.pointer for a in arrays]
        pointers += [
            device_array(r, f"output {a.name!r}").pointer
            for a, r in zip(self.outputs, results, strict=True)
        ]
        at = dict(zip([a.name for a in (*self.inputs, *self.outputs)], pointers, strict=True))
        maps = [gpu.encode_tensor_map(m, at[m.arg]) for m in tensor_maps(self.metadata, values)]
        if ordinal not in self._contexts:
            self._contexts[ordinal] = gpu.primary_context(ordinal)[1]
        context = self._contexts[ordinal]
        with _current(gpu, context):
            if ordinal not in self._modules:
                self._modules[ordinal] = gpu.CudaModule(
                    self.cubin, self.metadata["launch"]["kernels"]
                )
        return BoundLaunch(
            gpu,
            context,
            self._modules[ordinal],
            plan,
            workspaces,
            pointers,
            {s: values[s] for s in self.symbols},
            maps,
            _stream(gpu, stream, inputs[0] if inputs else None, arrays),
            results[0] if len(results) == 1 else tuple(results),
        )

    def _check_out(self, out: Any, shapes: list[tuple[int, ...]]) -> list[DeviceArray]:
        buffers = list(out) if isinstance(out, list | tuple) else [out]
        if len(buffers) != len(self.outputs):
            names = ", ".join(a.name for a in self.outputs)
            raise ValueError(f"out= must hold {len(self.outputs)} buffers ({names})")
        arrays = []
        for arg, buffer, shape in zip(self.outputs, buffers, shapes, strict=True):
            what = f"output {arg.name!r}"
            array = device_array(buffer, what)
            if array.dtype != arg.dtype:
                raise ValueError(f"{what} must have dtype {arg.dtype}, got {array.dtype}")
            if array.shape != shape:
                raise ValueError(f"{what} must have shape {list(shape)}, got {list(array.shape)}")
            if array.readonly:
                raise ValueError(f"{what} is read-only")
            _check_buffer(what, array)
            arrays.append(array)
        return arrays


class BoundLaunch:
    """One checked call of a CUDA kernel: `launch()` queues its kernels, in order, on its
    stream (again and again, on the same buffers); `close()` frees its workspaces (in stream
    order). `result` is the output, or the tuple of outputs."""

    def __init__(
        self,
        gpu: Any,
        context: Any,
        module: Any,
        plan: Plan,
        workspaces: list[int],
        pointers: list[int],
        symbols: dict[str, int],
        maps: list[Encoded],
        stream: Any,
        result: Any,
    ) -> None:
        self._gpu, self._context, self._module = gpu, context, module
        self.plan, self.stream, self.result = plan, stream, result
        driver, check = gpu.driver, gpu.check
        with _current(gpu, context):
            self._scratch = [
                int(check(driver.cuMemAllocAsync(max(n, 1), stream), f"cuMemAllocAsync({n})"))
                for n in workspaces
            ]
        self.params = kernel_params(pointers, self._scratch, symbols, list(symbols), maps)

    def __call__(self) -> None:
        with _current(self._gpu, self._context):
            for entry, grid, block, shared_bytes in self.plan:
                self._module.launch(entry, grid, block, shared_bytes, self.stream, self.params)

    def close(self) -> None:
        driver, check = self._gpu.driver, self._gpu.check
        with _current(self._gpu, self._context):
            while self._scratch:
                check(driver.cuMemFreeAsync(self._scratch.pop(), self.stream), "cuMemFreeAsync")


@contextlib.contextmanager
def _current(gpu: Any, context: Any) -> Iterator[None]:
    """`context` current on this thread inside the block, the thread's own one after it."""
    gpu.check(gpu.driver.cuCtxPushCurrent(context), "cuCtxPushCurrent")
    try:
        yield
    finally:
        gpu.check(gpu.driver.cuCtxPopCurrent(), "cuCtxPopCurrent")


def _check_buffer(what: str, array: DeviceArray) -> None:
    if not array.contiguous:
        raise ValueError(f"{what} is not C-contiguous (make a contiguous copy first)")
    if array.pointer == 0 and array.size > 0:
        raise ValueError(f"{what} has a null data pointer")
    if array.pointer % BUFFER_ALIGN:
        raise ValueError(
            f"{what} starts at {array.pointer:#x}, not {BUFFER_ALIGN}-byte aligned: the kernels "
            "read and copy buffers in 16-byte pieces (pass a fresh tensor, e.g. a .clone() of "
            "a slice)"
        )


def _driver() -> Any:
    """`targets.cuda.gpu` (cuda-python's driver API) with the driver initialized; a clear
    RuntimeError where cuda-python or the driver is missing."""
    try:
        from tunehub.targets.cuda import gpu
    except ImportError as exc:
        raise RuntimeError(
            f"launching CUDA kernels needs cuda-python (pip install cuda-python): {exc}"
        ) from exc
    try:
        gpu.check(gpu.driver.cuInit(0), "cuInit")
    except gpu.CudaError:
        raise
    except Exception as exc:  # cuda-python found no driver library
        raise RuntimeError(f"no CUDA driver on this machine: {exc}") from exc
    return gpu


def _ordinal(
    gpu: Any, arrays: Sequence[DeviceArray], inputs: Sequence[Arg], outputs: Sequence[Arg]
) -> int:
    """The device every buffer lives on; ValueError for host memory or several devices."""
    attribute = gpu.driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    names = [f"input {a.name!r}" for a in inputs] + [f"output {a.name!r}" for a in outputs]
    found: dict[int, str] = {}
    for what, array in zip(names, arrays, strict=False):
        if array.size == 0:
            continue
        try:
            ordinal = int(
                gpu.check(gpu.driver.cuPointerGetAttribute(attribute, array.pointer), what)
            )
        except gpu.CudaError as exc:
            raise ValueError(f"{what} is not in CUDA device memory ({exc})") from exc
        found.setdefault(ordinal, what)
    if len(found) > 1:
        where = ", ".join(f"{what} on device {n}" for n, what in found.items())
        raise ValueError(f"the buffers are on several devices: {where}")
    if found:
        return next(iter(found))
    return 0


def _allocator(sample: Any, ordinal: int) -> Callable[[tuple[int, ...], str], Any]:
    """How to allocate the outputs: as torch or cupy if the first input is one, else as cupy
    if it can be imported; RuntimeError (asking for out=) otherwise."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(sample, torch.Tensor):
        return lambda shape, dtype: torch.empty(
            shape, dtype=getattr(torch, dtype), device=sample.device
        )
    try:
        cupy = importlib.import_module("cupy")
    except ImportError as exc:
        raise RuntimeError(
            "these inputs are neither torch nor cupy arrays and cupy is not installed: "
            "pass the outputs as out= buffers"
        ) from exc

    def empty(shape: tuple[int, ...], dtype: str) -> Any:
        with cupy.cuda.Device(ordinal):
            return cupy.empty(shape, dtype=numpy_dtype(dtype))

    return empty


def _stream(gpu: Any, given: int | None, sample: Any, arrays: Sequence[DeviceArray]) -> Any:
    """The stream to launch on: `stream=`, else torch's or cupy's current stream for their
    arrays, else the stream an input's interface names, else the legacy default."""
    driver = gpu.driver
    if given is not None:
        return driver.CUstream(given)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(sample, torch.Tensor):
        return driver.CUstream(torch.cuda.current_stream(sample.device).cuda_stream)
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(sample, cupy.ndarray):
        with sample.device:
            return driver.CUstream(cupy.cuda.get_current_stream().ptr)
    named = next((a.stream for a in arrays if a.stream is not None), 0)
    return driver.CUstream(named)
