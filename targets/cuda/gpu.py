"""A CUDA GPU through cuda-python's driver API: `CudaModule` loads a cubin and launches its
kernels in whatever context is current (`client.load_kernel` uses it in the caller's process),
and `Gpu` is the device as the measuring child uses it.

A worker imports this only inside the sandboxed child (`targets.cuda.child`), which is
a fresh interpreter: the CUDA context is created there and dies with it, so a kernel that
faults (a sticky error that poisons the context) or hangs costs that child, never the worker.

Untested on hardware in the session that wrote it: `tests/targets/cuda/test_measure_gpu.py`
(marked `gpu`) is its check on a machine with a GPU.

Timing follows triton's `do_bench`: before every timed call the L2 cache is flushed by a
memset of a buffer twice its size, and each call is bracketed by its own pair of events on
one stream. The launches are queued behind the memset, so no host launch overhead enters the
measured interval, and every call reads its inputs from device memory, which makes rotating
copies of the inputs (the remedy when calls run back to back) unnecessary.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from cuda.bindings import driver

from tunehub.targets.cuda.emulate.emulator import pack_params
from tunehub.targets.cuda.tensor_map import WORDS, Encoded, TensorMap

# Past the 48 KiB every kernel may use, dynamic shared memory needs the function's opt-in.
DEFAULT_DYNAMIC_SHARED = 48 * 1024


class CudaError(RuntimeError):
    """A driver call failed; the message names the call and the CUDA error."""


def check(result: tuple[Any, ...], what: str) -> Any:
    """The value(s) of a driver call's `(CUresult, *values)`; CudaError unless it succeeded."""
    error, *values = result
    if error != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(error)
        _, text = driver.cuGetErrorString(error)
        raise CudaError(f"{what}: {_text(name)} ({_text(text)})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def primary_context(ordinal: int) -> tuple[Any, Any]:
    """(device, its primary context, retained): the context the CUDA runtime, torch and cupy
    use, so kernels launched in it see their memory. Not made current here."""
    check(driver.cuInit(0), "cuInit")
    device = check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
    return device, check(driver.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")


_MAP_TYPES = {
    "float16": driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
    "bfloat16": driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
    "float32": driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
}


def encode_tensor_map(tensor_map: TensorMap, address: int) -> Encoded:
    """The driver's encoding of a map (`targets.cuda.tensor_map`) over the buffer at device
    `address`: 128-byte swizzle, elements outside the buffer read as zeros, L2 fetches of
    256 bytes (as CUTLASS asks for its operand tiles)."""
    assert tensor_map.swizzle == 128, tensor_map
    rank = len(tensor_map.dims)
    encoded = check(
        driver.cuTensorMapEncodeTiled(
            _MAP_TYPES[tensor_map.dtype],
            rank,
            address,
            [driver.cuuint64_t(d) for d in tensor_map.dims],
            [driver.cuuint64_t(s) for s in tensor_map.strides],
            [driver.cuuint32_t(b) for b in tensor_map.box],
            [driver.cuuint32_t(1)] * rank,
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        ),
        f"cuTensorMapEncodeTiled({tensor_map.arg})",
    )
    return (ctypes.c_uint64 * WORDS)(*(int(word) for word in encoded.opaque))


class CudaModule:
    """A cubin loaded into the current context, its kernels (`Kernel.launch["kernels"]`)
    looked up and opted in to their dynamic shared memory."""

    def __init__(self, image: bytes, kernels: Sequence[dict[str, Any]]) -> None:
        self.handle = check(driver.cuModuleLoadData(image), "cuModuleLoadData")
        self.functions: dict[str, Any] = {}
        for kernel in kernels:
            entry = kernel["entry"]
            function = check(
                driver.cuModuleGetFunction(self.handle, entry.encode()),
                f"cuModuleGetFunction({entry})",
            )
            if kernel["shared_bytes"] > DEFAULT_DYNAMIC_SHARED:
                attribute = (
                    driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                )
                check(
                    driver.cuFuncSetAttribute(function, attribute, kernel["shared_bytes"]),
                    f"cuFuncSetAttribute({entry}, max dynamic shared memory)",
                )
            self.functions[entry] = function

    def launch(
        self,
        entry: str,
        grid: Sequence[int],
        block: Sequence[int],
        shared_bytes: int,
        stream: Any,
        params: Sequence[ctypes._SimpleCData[Any]],
    ) -> None:
        """Queue kernel `entry` on `stream` with `params` (`targets.cuda.launch`)."""
        array, _values = pack_params(params)  # the driver copies the values at the launch
        check(
            driver.cuLaunchKernel(
                self.functions[entry],
                *grid,
                *block,
                shared_bytes,
                stream,
                ctypes.addressof(array),
                0,
            ),
            f"cuLaunchKernel({entry})",
        )

    def unload(self) -> None:
        check(driver.cuModuleUnload(self.handle), "cuModuleUnload")
        self.functions = {}


class Gpu:
    """Device 0 of the visible devices, its primary context current in this process."""

    timed = True
    errors: tuple[type[Exception], ...] = (CudaError,)

    def __init__(self, ordinal: int = 0) -> None:
        self.device, self.context = primary_context(ordinal)
        check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        # A blocking stream: the synchronous copies (on the legacy stream) and the launches
        # (on this one) wait for each other, so no upload races a kernel.
        self.stream = check(
            driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_DEFAULT.value), "cuStreamCreate"
        )
        self.events: list[tuple[Any, Any]] = []
        self.module: CudaModule | None = None
        self.allocations: list[int] = []  # the flush buffer first, then a candidate's
        l2 = self.attribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
        self.flush_bytes = 2 * max(l2, 1 << 20)
        self.flush = self.alloc(self.flush_bytes)

    def attribute(self, attribute: driver.CUdevice_attribute) -> int:
        return int(check(driver.cuDeviceGetAttribute(attribute, self.device), str(attribute)))

    # ---- a candidate's module and memory

    def load(self, artifact: str, kernels: Sequence[dict[str, Any]]) -> None:
        """Load the cubin at path `artifact` and look up its kernels."""
        with open(artifact, "rb") as f:
            self.module = CudaModule(f.read(), kernels)

    def alloc(self, nbytes: int) -> int:
        pointer = int(check(driver.cuMemAlloc(max(nbytes, 1)), f"cuMemAlloc({nbytes})"))
        self.allocations.append(pointer)
        return pointer

    def write(self, address: int, data: np.ndarray) -> None:
        check(driver.cuMemcpyHtoD(address, data.ctypes.data, data.nbytes), "cuMemcpyHtoD")

    def read(self, address: int, out: np.ndarray) -> None:
        check(driver.cuMemcpyDtoH(out.ctypes.data, address, out.nbytes), "cuMemcpyDtoH")

    def tensor_map(self, tensor_map: TensorMap, address: int) -> Encoded:
        return encode_tensor_map(tensor_map, address)

    def release(self) -> None:
        """Free the candidate's buffers and unload its module (the flush buffer stays)."""
        for pointer in self.allocations[1:]:
            check(driver.cuMemFree(pointer), "cuMemFree")
        del self.allocations[1:]
        if self.module is not None:
            self.module.unload()
        self.module = None

    # ---- running

    def launch(
        self,
        entry: str,
        grid: Sequence[int],
        block: Sequence[int],
        shared_bytes: int,
        params: Sequence[ctypes._SimpleCData[Any]],
    ) -> None:
        """Queue kernel `entry` on the stream (errors of its execution surface at a sync)."""
        assert self.module is not None, "launch before load"
        self.module.launch(entry, grid, block, shared_bytes, self.stream, params)

    def synchronize(self) -> None:
        check(driver.cuStreamSynchronize(self.stream), "kernel execution")

    def time_calls(self, call: Callable[[], None], number: int) -> float:
        """Mean seconds per call over `number` calls of `call` (which queues launches on the
        stream), each after an L2 flush and between its own two events."""
        while len(self.events) < number:
            flags = driver.CUevent_flags.CU_EVENT_DEFAULT.value
            pair = (
                check(driver.cuEventCreate(flags), "cuEventCreate"),
                check(driver.cuEventCreate(flags), "cuEventCreate"),
            )
            self.events.append(pair)
        for n in range(number):
            check(
                driver.cuMemsetD8Async(self.flush, n & 0xFF, self.flush_bytes, self.stream),
                "cuMemsetD8Async (L2 flush)",
            )
            start, end = self.events[n]
            check(driver.cuEventRecord(start, self.stream), "cuEventRecord")
            call()
            check(driver.cuEventRecord(end, self.stream), "cuEventRecord")
        check(driver.cuEventSynchronize(self.events[number - 1][1]), "kernel execution")
        total_ms = sum(
            float(check(driver.cuEventElapsedTime(start, end), "cuEventElapsedTime"))
            for start, end in self.events[:number]
        )
        return total_ms / 1e3 / number


def devices() -> list[dict[str, Any]]:
    """Every visible GPU as the fingerprint names it (see `worker.device.gpus`)."""
    check(driver.cuInit(0), "cuInit")
    version = int(check(driver.cuDriverGetVersion(), "cuDriverGetVersion"))
    found = []
    for ordinal in range(int(check(driver.cuDeviceGetCount(), "cuDeviceGetCount"))):
        device = check(driver.cuDeviceGet(ordinal), "cuDeviceGet")

        def attribute(name: str, device: Any = device) -> int:
            value = getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
            return int(check(driver.cuDeviceGetAttribute(value, device), name))

        name = check(driver.cuDeviceGetName(256, device), "cuDeviceGetName")
        major, minor = attribute("COMPUTE_CAPABILITY_MAJOR"), attribute("COMPUTE_CAPABILITY_MINOR")
        found.append(
            {
                "gpu_name": _text(name).split("\0")[0].strip(),
                "gpu_arch": f"sm_{major}{minor}",
                "gpu_sm_count": attribute("MULTIPROCESSOR_COUNT"),
                "gpu_memory_bytes": int(check(driver.cuDeviceTotalMem(device), "cuDeviceTotalMem")),
                "gpu_l2_bytes": attribute("L2_CACHE_SIZE"),
                "driver_version": f"{version // 1000}.{version % 1000 // 10}",
            }
        )
    return found


if __name__ == "__main__":
    # `python -m tunehub.targets.cuda.gpu`: the GPUs as JSON, for a parent that must not create a
    # CUDA context itself. Without a driver (or a GPU) the list is empty and `error` says why.
    import json

    try:
        print(json.dumps({"devices": devices()}))
    except Exception as exc:
        print(json.dumps({"devices": [], "error": f"{type(exc).__name__}: {exc}"}))
