"""The GPU runner's driver-API code (`targets.cuda.gpu`) against a stand-in driver, so that it
runs end to end on a machine without a GPU.

Every call first goes to the real cuda-python binding, whose argument conversion runs before
it looks for the driver library: a wrong argument type fails here as it would on a GPU. Then
the stand-in does the work on host memory and launches the kernels through the emulator
(`kernelParams` is the very array the emulator's launchers take). What only hardware can
tell, the driver's own behaviour, is `test_measure_gpu.py`'s to check.
"""

from __future__ import annotations

import ctypes
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from cuda.bindings import driver as real

from tests.targets.cuda import cases
from tunehub.compiler.kernel import Kernel
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda import child as cuda_child
from tunehub.targets.cuda import gpu
from tunehub.targets.cuda.emulate.emulator import EmulatedBuilder, Library
from tunehub.targets.cuda.tensor_map import TensorMap, emulated
from tunehub.worker.measure.case import CaseCache
from tunehub.worker.measure.measuring import Loaded
from tunehub.worker.measure.runner import MeasureResult
from tunehub.worker.measure.sandboxed import Request


def _driver_missing() -> bool:
    try:
        real.cuInit(0)
    except Exception as exc:
        return type(exc).__name__ == "DynamicLibNotFoundError"
    return False


# With a driver present the real calls would act on the stand-in's fake handles.
pytestmark = pytest.mark.skipif(not _driver_missing(), reason="a CUDA driver is installed")
OK = real.CUresult.CUDA_SUCCESS
L2_BYTES = 1 << 20


class StandIn:
    """The driver calls the GPU runner makes, on the host; anything else is the real module's
    (enums, handle types)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.memory: dict[int, np.ndarray] = {}
        self.modules: dict[int, Library] = {}
        self.functions: dict[int, tuple[Library, str]] = {}
        self.events: dict[int, float] = {}
        self.attributes: list[tuple[str, int]] = []
        self.handles = itertools.count(1)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(real, name)
        if not name.startswith("cu") or isinstance(attribute, type):  # cuuint64_t, ...
            return attribute
        method = getattr(type(self), f"_{name}")

        def call(*args: Any) -> Any:
            try:
                attribute(*args)  # its argument checks; then it finds no driver
            except TypeError:
                raise
            except Exception as exc:
                assert type(exc).__name__ == "DynamicLibNotFoundError", exc
            return method(self, *args)

        return call

    def _cuInit(self, flags: int) -> tuple[Any, ...]:
        return (OK,)

    def _cuDriverGetVersion(self) -> tuple[Any, ...]:
        return (OK, 13000)

    def _cuDeviceGetCount(self) -> tuple[Any, ...]:
        return (OK, 1)

    def _cuDeviceGet(self, ordinal: int) -> tuple[Any, ...]:
        return (OK, real.CUdevice(ordinal))

    def _cuDeviceGetName(self, length: int, device: Any) -> tuple[Any, ...]:
        return (OK, b"Stand-in GPU".ljust(length, b"\0"))

    def _cuDeviceTotalMem(self, device: Any) -> tuple[Any, ...]:
        return (OK, 80 << 30)

    def _cuDeviceGetAttribute(self, attribute: Any, device: Any) -> tuple[Any, ...]:
        values = {"L2_CACHE_SIZE": L2_BYTES, "COMPUTE_CAPABILITY_MAJOR": 9}
        name = attribute.name.removeprefix("CU_DEVICE_ATTRIBUTE_")
        return (OK, values.get(name, 0 if "MINOR" in name else 132))

    def _cuDevicePrimaryCtxRetain(self, device: Any) -> tuple[Any, ...]:
        return (OK, real.CUcontext(next(self.handles)))

    def _cuCtxSetCurrent(self, context: Any) -> tuple[Any, ...]:
        return (OK,)

    def _cuStreamCreate(self, flags: int) -> tuple[Any, ...]:
        return (OK, real.CUstream(next(self.handles)))

    def _cuMemAlloc(self, nbytes: int) -> tuple[Any, ...]:
        buffer = np.zeros(nbytes + 256, np.uint8)
        address = buffer.ctypes.data + (-buffer.ctypes.data) % 256
        self.memory[address] = buffer
        return (OK, real.CUdeviceptr(address))

    def _cuMemFree(self, pointer: Any) -> tuple[Any, ...]:
        del self.memory[int(pointer)]
        return (OK,)

    def _cuMemcpyHtoD(self, destination: Any, source: int, nbytes: int) -> tuple[Any, ...]:
        ctypes.memmove(int(destination), source, nbytes)
        return (OK,)

    def _cuMemcpyDtoH(self, destination: int, source: Any, nbytes: int) -> tuple[Any, ...]:
        ctypes.memmove(destination, int(source), nbytes)
        return (OK,)

    def _cuMemsetD8Async(self, pointer: Any, value: int, n: int, stream: Any) -> tuple[Any, ...]:
        ctypes.memset(int(pointer), value, n)
        return (OK,)

    def _cuModuleLoadData(self, image: bytes) -> tuple[Any, ...]:
        handle = next(self.handles)
        path = self.directory / f"module-{handle}.so"
        path.write_bytes(image)
        self.modules[handle] = Library(path)
        return (OK, real.CUmodule(handle))

    def _cuModuleUnload(self, module: Any) -> tuple[Any, ...]:
        del self.modules[int(module)]
        return (OK,)

    def _cuModuleGetFunction(self, module: Any, name: bytes) -> tuple[Any, ...]:
        handle = next(self.handles)
        self.functions[handle] = (self.modules[int(module)], name.decode())
        return (OK, real.CUfunction(handle))

    def _cuFuncSetAttribute(self, function: Any, attribute: Any, value: int) -> tuple[Any, ...]:
        self.attributes.append((self.functions[int(function)][1], value))
        return (OK,)

    def _cuTensorMapEncodeTiled(self, dtype: Any, rank: int, address: int, *rest: Any) -> Any:
        """The emulator's encoding (`tensor_map.emulated`) of the map the driver is asked for,
        whose strides must be the buffer's row-major ones, every element taken, swizzled."""
        dims, strides, box, steps, _interleave, swizzle, _l2, _fill = rest
        types = {
            real.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16: "float16",
            real.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: "bfloat16",
            real.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32: "float32",
        }
        assert swizzle == real.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B
        assert len(dims) == rank and [int(step) for step in steps] == [1] * rank
        shape = tuple(int(d) for d in dims)
        tensor_map = TensorMap("stand-in", types[dtype], shape, tuple(int(b) for b in box), 128)
        assert tensor_map.strides == tuple(int(stride) for stride in strides)
        return (OK, SimpleNamespace(opaque=list(emulated(tensor_map, int(address)))))

    def _cuLaunchKernel(self, function: Any, *args: Any) -> tuple[Any, ...]:
        gx, gy, gz, bx, by, bz, shared, _stream, params, _extra = args
        library, entry = self.functions[int(function)]
        dims = ctypes.c_uint * 3
        code = library.launcher(entry)(
            dims(gx, gy, gz), dims(bx, by, bz), ctypes.c_ulonglong(shared), ctypes.c_void_p(params)
        )
        return (real.CUresult.CUDA_ERROR_INVALID_VALUE if code else OK,)

    def _cuStreamSynchronize(self, stream: Any) -> tuple[Any, ...]:
        return (OK,)

    def _cuEventCreate(self, flags: int) -> tuple[Any, ...]:
        return (OK, real.CUevent(next(self.handles)))

    def _cuEventRecord(self, event: Any, stream: Any) -> tuple[Any, ...]:
        self.events[int(event)] = time.perf_counter()
        return (OK,)

    def _cuEventSynchronize(self, event: Any) -> tuple[Any, ...]:
        return (OK,)

    def _cuEventElapsedTime(self, start: Any, end: Any) -> tuple[Any, ...]:
        return (OK, 1e3 * (self.events[int(end)] - self.events[int(start)]))

    def _cuGetErrorName(self, error: Any) -> tuple[Any, ...]:
        return (OK, error.name.encode())

    def _cuGetErrorString(self, error: Any) -> tuple[Any, ...]:
        return (OK, b"stand-in error")


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[StandIn]:
    driver = StandIn(tmp_path)
    monkeypatch.setattr(gpu, "driver", driver)
    yield driver


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return Loaded.of(cases.case(CaseCache(tmp_path_factory.mktemp("cache"))))


def measure(kernel: Kernel, loaded: Any, directory: Path, device: gpu.Gpu) -> MeasureResult:
    built = EmulatedBuilder().build(kernel, Target(kind="cuda", arch="sm_90"), timeout_s=300)
    assert built.artifact is not None, built.log
    artifact = directory / "candidate.bin"
    artifact.write_bytes(built.artifact)
    request = Request(
        backend="gpu",
        artifact=str(artifact),
        metadata=kernel.metadata(),
        case=cases.case(CaseCache(directory)),
        reduce_extents={"out": 1},
        repeats=3,
        min_repeat_s=0.001,
        timeout_s=60,
    )
    replies = list(cuda_child._measure(request, loaded, device))
    assert replies[-1][0] == "result"
    return replies[-1][1]


@pytest.mark.parametrize("kernel", cases.CORRECT_ONES)
def test_candidates_are_verified_and_timed_with_events(
    standin: StandIn, loaded: Any, tmp_path: Path, kernel: Kernel
) -> None:
    device = gpu.Gpu()
    result = measure(kernel, loaded, tmp_path, device)
    assert result.status is RecordStatus.OK, result.log
    assert len(result.latencies_s) == 3 and all(t > 0 for t in result.latencies_s)
    # Everything but the L2 flush buffer is freed, and the module unloaded.
    assert list(standin.memory) == [device.flush] and not standin.modules
    assert device.flush_bytes == 2 * L2_BYTES
    shared = kernel.launch["kernels"][0]["shared_bytes"]
    assert standin.attributes == ([("axpy_0", shared)] if shared > 48 * 1024 else [])


@pytest.mark.parametrize(
    ("kernel", "status", "log"),
    [
        (cases.WRONG, RecordStatus.WRONG_ANSWER, "elements differ"),
        (cases.PAST_THE_END, RecordStatus.RUNTIME_ERROR, "guard bytes"),
        (cases.INTO_INPUT, RecordStatus.RUNTIME_ERROR, "into its input 'a'"),
        (
            cases.TOO_MANY_THREADS,
            RecordStatus.RUNTIME_ERROR,
            "cuLaunchKernel(axpy_0): CUDA_ERROR_INVALID_VALUE (stand-in error)",
        ),
    ],
    ids=["wrong", "past-the-end", "into-input", "refused-launch"],
)
def test_failures_are_recorded(
    standin: StandIn,
    loaded: Any,
    tmp_path: Path,
    kernel: Kernel,
    status: RecordStatus,
    log: str,
) -> None:
    device = gpu.Gpu()
    result = measure(kernel, loaded, tmp_path, device)
    assert result.status is status
    assert log in result.log
    assert list(standin.memory) == [device.flush]


def test_devices_describe_each_gpu(standin: StandIn) -> None:
    assert gpu.devices() == [
        {
            "gpu_name": "Stand-in GPU",
            "gpu_arch": "sm_90",
            "gpu_sm_count": 132,
            "gpu_memory_bytes": 80 << 30,
            "gpu_l2_bytes": L2_BYTES,
            "driver_version": "13.0",
        }
    ]
