"""`load_kernel` on CUDA artifacts: the directory round trip, the launch plan, the checks made
of every call before anything runs, and whole calls.

Without a GPU, whole calls run against the stand-in driver of `test_gpu_standin.py` (host
memory, kernels through the emulator), on host arrays posing as device arrays through
`__cuda_array_interface__`. With a GPU (`pytest -m gpu tests/targets/cuda/test_load_kernel.py`),
candidates built by nvcc run on torch and cupy tensors.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.signatures import row_matmul
from tests.targets.cuda import cases
from tests.targets.cuda.test_gpu_standin import OK, StandIn, _driver_missing
from tests.targets.cuda.test_wgmma import wgmma_config
from tests.targets.cuda.test_wmma import matmul
from tunehub.client import load_kernel, save_kernel
from tunehub.compiler.inputs import random_inputs
from tunehub.compiler.kernel import Kernel
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.reference import evaluate
from tunehub.compiler.space import space_for
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cuda import device, gpu
from tunehub.targets.cuda.build import CudaBuilder
from tunehub.targets.cuda.emulate.emulator import EmulatedBuilder
from tunehub.targets.cuda.kernel import CudaKernel
from tunehub.worker.build.builder import Builder

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SM90 = Target(kind="cuda", arch="sm_90")
MATMUL = row_matmul("matmul_rows", k=48, n=40, max_m=256)


class FakeDeviceArray:
    """A numpy array's memory behind `__cuda_array_interface__` (v3), as device memory is to
    the stand-in driver."""

    def __init__(self, array: np.ndarray, *, readonly: bool = False, typestr: str = "") -> None:
        self.array = array
        contiguous = array.flags.c_contiguous
        self.__cuda_array_interface__ = {
            "shape": array.shape,
            "typestr": typestr or array.dtype.str,
            "data": (array.ctypes.data, readonly),
            "strides": None if contiguous else array.strides,
            "version": 3,
            "stream": None,
        }


def export(kernel: Kernel, artifact: bytes, directory: Path) -> CudaKernel:
    save_kernel(directory, artifact, kernel.source, kernel.metadata())
    loaded = load_kernel(directory)
    assert isinstance(loaded, CudaKernel)
    return loaded


def built(kernel: Kernel, builder: Builder, target: Target = SM90) -> bytes:
    result = builder.build(kernel, target, timeout_s=300)
    assert result.status is RecordStatus.OK and result.artifact is not None, result.log
    return result.artifact


# ---------------------------------------------------------------- the directory, the plan


def test_a_cuda_artifact_round_trips_with_its_launch_metadata(tmp_path: Path) -> None:
    program = load(MATMUL)
    kernel = lower(program, SM90, space_for(program, SM90).default())
    metadata = {**kernel.metadata(), "target": "cuda:sm_90", "ptx": "// the PTX\n"}
    save_kernel(tmp_path, b"cubin bytes", kernel.source, metadata)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["kernel.cu", "kernel.cubin", "kernel.ptx", "metadata.json"]
    assert (tmp_path / "kernel.ptx").read_text() == "// the PTX\n"
    written = json.loads((tmp_path / "metadata.json").read_text())
    assert "ptx" not in written and written["launch"] == kernel.launch

    loaded = load_kernel(tmp_path)
    assert isinstance(loaded, CudaKernel)
    assert loaded.cubin == b"cubin bytes"
    assert [a.name for a in loaded.inputs] == ["A", "B"] and loaded.symbols == ["M"]
    assert [(a.name, a.shape, a.dtype) for a in loaded.outputs] == [("C", ("M", 40), "float32")]
    assert repr(loaded).startswith(f"<CudaKernel {kernel.entry}(A: float32['M', 48]")
    entries = [k["entry"] for k in kernel.launch["kernels"]]
    assert [entry for entry, *_ in loaded.plan({"M": 100})] == entries


def test_the_plan_evaluates_grids_and_workspaces_from_the_symbols(tmp_path: Path) -> None:
    skip_second = {"entry": "axpy_1", "grid": ["N / 2048", "1", "1"], "block": [64, 1, 1]}
    kernel = cases.kernel(
        "",
        grid=["(N + 127) / 128", "min(N, 4)", "1"],
        extra=[{**skip_second, "shared_bytes": 64 * 1024}],
        workspace=[{"name": "ws", "bytes": "N * 4"}, {"name": "flags", "bytes": "(N + 31) / 32"}],
    )
    k = export(kernel, b"cubin", tmp_path)
    assert k.plan({"N": 1000}) == [("axpy_0", [8, 4, 1], [128, 1, 1], 0)]
    assert k.plan({"N": 4096}) == [
        ("axpy_0", [32, 4, 1], [128, 1, 1], 0),
        ("axpy_1", [2, 1, 1], [64, 1, 1], 64 * 1024),
    ]
    assert k.workspace_bytes({"N": 1000}) == [4000, 32]


def test_a_launch_this_version_cannot_pass_is_refused_at_load(tmp_path: Path) -> None:
    metadata = cases.CORRECT.metadata()
    metadata["launch"] = {**metadata["launch"], "clusters": [2, 1, 1]}
    save_kernel(tmp_path, b"cubin", None, metadata)
    with pytest.raises(ValueError, match="launch holds clusters, which this version"):
        load_kernel(tmp_path)


def test_a_directory_without_its_cubin_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "metadata.json").write_text(json.dumps(cases.CORRECT.metadata()))
    with pytest.raises(FileNotFoundError, match=r"kernel\.cubin not found"):
        load_kernel(tmp_path)


# ----------------------------------------------------------- checks before anything runs


@pytest.fixture
def axpy(tmp_path: Path) -> CudaKernel:
    return export(cases.CORRECT, b"never loaded", tmp_path)


def fake(n: int, dtype: str = "float32") -> FakeDeviceArray:
    return FakeDeviceArray(np.zeros(n, dtype))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda k: k(fake(8)), ValueError, r"expected 2 inputs \(a, b\), got 1"),
        (lambda k: k(fake(8), fake(8, "float16")), ValueError, "'b' must have dtype float32"),
        (lambda k: k(fake(8), fake(9)), ValueError, "'b' axis 0 is N=9, but N=8 elsewhere"),
        (lambda k: k(fake(8), fake(8), N=9), ValueError, "N=8, but N=9 elsewhere"),
        (lambda k: k(fake(8), fake(8), M=9), ValueError, "unknown symbols: M"),
        (
            lambda k: k(FakeDeviceArray(np.zeros((2, 4), np.float32)), fake(8)),
            ValueError,
            r"input 'a' must have rank 1",
        ),
        (
            lambda k: k(FakeDeviceArray(np.zeros(16, np.float32)[::2]), fake(8)),
            ValueError,
            "input 'a' is not C-contiguous",
        ),
        (
            lambda k: k(fake(8), FakeDeviceArray(np.zeros(9, np.float32)[1:])),
            ValueError,
            r"input 'b' starts at 0x[0-9a-f]+, not 16-byte aligned",
        ),
        (
            lambda k: k(FakeDeviceArray(np.zeros(8, ">f4")), fake(8)),
            ValueError,
            r"got >f4 \(non-native byte order\)",
        ),
        (lambda k: k(np.zeros(8, np.float32), fake(8)), TypeError, "input 'a' is a numpy.ndarray"),
        (
            lambda k: k(fake(8), fake(8), out=[fake(8), fake(8)]),
            ValueError,
            r"out= must hold 1 buffers \(out\)",
        ),
        (lambda k: k(fake(8), fake(8), out=fake(9)), ValueError, r"must have shape \[8\]"),
        (
            lambda k: k(
                fake(8), fake(8), out=FakeDeviceArray(np.zeros(8, np.float32), readonly=True)
            ),
            ValueError,
            "output 'out' is read-only",
        ),
    ],
    ids=[
        "count",
        "dtype",
        "shapes-disagree",
        "symbol-disagrees",
        "unknown-symbol",
        "rank",
        "strided",
        "misaligned",
        "byte-order",
        "host-array",
        "out-count",
        "out-shape",
        "out-readonly",
    ],
)
def test_bad_calls_are_refused_before_anything_runs(
    axpy: CudaKernel, call: Any, error: type[Exception], message: str
) -> None:
    # No driver is touched: on this machine a launch would fail with "no CUDA driver".
    with pytest.raises(error, match=message):
        call(axpy)


def test_a_null_pointer_is_refused(axpy: CudaKernel) -> None:
    null = fake(8)
    null.__cuda_array_interface__["data"] = (0, False)
    with pytest.raises(ValueError, match="input 'a' has a null data pointer"):
        axpy(null, fake(8))


# ------------------------------------------------- whole calls against the stand-in driver


class ClientStandIn(StandIn):
    """The stand-in driver plus what a call in the caller's process uses: pointer queries,
    context push and pop, stream-ordered allocations."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.current: list[Any] = []
        self.launches = 0

    def _cuPointerGetAttribute(self, attribute: Any, pointer: int) -> tuple[Any, ...]:
        return (OK, 0)

    def _cuCtxPushCurrent(self, context: Any) -> tuple[Any, ...]:
        self.current.append(context)
        return (OK,)

    def _cuCtxPopCurrent(self) -> tuple[Any, ...]:
        return (OK, self.current.pop())

    def _cuMemAllocAsync(self, nbytes: int, stream: Any) -> tuple[Any, ...]:
        return self._cuMemAlloc(nbytes)

    def _cuMemFreeAsync(self, pointer: Any, stream: Any) -> tuple[Any, ...]:
        return self._cuMemFree(pointer)

    def _cuLaunchKernel(self, function: Any, *args: Any) -> tuple[Any, ...]:
        self.launches += 1
        return super()._cuLaunchKernel(function, *args)


needs_standin = pytest.mark.skipif(not _driver_missing(), reason="a CUDA driver is installed")


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ClientStandIn]:
    driver = ClientStandIn(tmp_path)
    monkeypatch.setattr(gpu, "driver", driver)
    yield driver


@needs_standin
def test_two_kernels_and_a_workspace_run_in_order(standin: ClientStandIn, tmp_path: Path) -> None:
    k = export(cases.TWO_KERNELS, built(cases.TWO_KERNELS, EmulatedBuilder()), tmp_path / "k")
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, 1000).astype(np.float32) for _ in range(2))
    out = FakeDeviceArray(np.full(1000, np.nan, np.float32))
    assert k(FakeDeviceArray(a), FakeDeviceArray(b), out=out) is out
    np.testing.assert_array_equal(out.array, 2 * a + b)
    assert standin.launches == 2
    assert not standin.memory and not standin.current  # workspace freed, context popped
    launch = k.bind(FakeDeviceArray(a), FakeDeviceArray(b), out=(out,))
    launch()
    launch()
    assert standin.launches == 6 and len(standin.memory) == 1  # the workspace, until closed
    launch.close()
    assert not standin.memory and len(standin.modules) == 1  # loaded once per device


@needs_standin
@pytest.mark.parametrize("signature", ["softmax", "matmul"])
def test_lowered_kernels_match_the_reference(
    standin: ClientStandIn, tmp_path: Path, signature: str
) -> None:
    document = (
        MATMUL if signature == "matmul" else json.loads((EXAMPLES / "softmax.json").read_text())
    )
    program = load(document)
    kernel = lower(program, SM90, space_for(program, SM90).default())
    k = export(kernel, built(kernel, EmulatedBuilder()), tmp_path / "k")
    symbols = {"M": 37} if program.symbols else {}
    inputs = random_inputs(program, symbols, seed=3)
    expected = evaluate(program, inputs, symbols)
    (name,) = expected
    out = FakeDeviceArray(np.full(expected[name].shape, np.nan, np.float32))
    k(*(FakeDeviceArray(inputs[t.name]) for t in program.inputs), out=out)
    np.testing.assert_allclose(out.array, expected[name], rtol=1e-5, atol=1e-6)


@needs_standin
def test_tensor_maps_are_encoded_per_call_after_the_symbols(
    standin: ClientStandIn, tmp_path: Path
) -> None:
    """A Hopper GEMM whose tiles come and go through the copy engine (TMA loads and stores):
    the client encodes a map per buffer with the driver at each call and passes them after
    the symbols, and the result matches the reference (the stand-in driver encodes the
    emulator's form, after cuda-python has checked the arguments)."""
    program = matmul("float16", "M", 96, 80, epilogue=True)
    space = space_for(program, SM90)
    knobs = {"wgmma_producer": True, "wgmma_tma": True, "wgmma_store": True, "wgmma_bn": 64}
    config = wgmma_config(space, **knobs)
    kernel = lower(program, SM90, config)
    assert [m["arg"] for m in kernel.launch["tensor_maps"]] == ["A", "B", "out"]
    k = export(kernel, built(kernel, EmulatedBuilder()), tmp_path / "k")
    symbols = {"M": 70}
    inputs = random_inputs(program, symbols, seed=3)
    expected = evaluate(program, inputs, symbols)["out"]
    out = FakeDeviceArray(np.full(expected.shape, np.nan, np.float16))
    k(*(FakeDeviceArray(inputs[t.name]) for t in program.inputs), out=out)
    np.testing.assert_allclose(out.array, expected, rtol=1e-2, atol=1e-2)


@needs_standin
@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="cupy is installed")
def test_without_torch_cupy_or_out_the_call_asks_for_out(
    standin: ClientStandIn, axpy: CudaKernel
) -> None:
    with pytest.raises(RuntimeError, match="pass the outputs as out= buffers"):
        axpy(fake(8), fake(8))
    assert standin.launches == 0


def test_without_a_driver_a_call_says_so(axpy: CudaKernel) -> None:
    if not _driver_missing():
        pytest.skip("a CUDA driver is installed")
    with pytest.raises(RuntimeError, match="no CUDA driver"):
        axpy(fake(8), fake(8), out=fake(8))


# ------------------------------------------------------------------------ on a real GPU

GPUS = device.gpus()


def gpu_kernel(document: dict[str, Any], tmp_path: Path) -> tuple[Any, CudaKernel]:
    target = Target(kind="cuda", arch=GPUS[0]["gpu_arch"])
    program = load(document)
    kernel = lower(program, target, space_for(program, target).default())
    return program, export(kernel, built(kernel, CudaBuilder(), target), tmp_path)


def signatures() -> list[dict[str, Any]]:
    return [MATMUL, json.loads((EXAMPLES / "softmax.json").read_text())]


@pytest.mark.gpu
@pytest.mark.skipif(not GPUS, reason="no CUDA GPU visible")
@pytest.mark.parametrize("document", signatures(), ids=["matmul", "softmax"])
@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_on_a_gpu_with_torch_and_cupy(
    document: dict[str, Any], framework: str, tmp_path: Path
) -> None:
    module = pytest.importorskip(framework)
    program, k = gpu_kernel(document, tmp_path)
    symbols = {"M": 100} if program.symbols else {}
    inputs = random_inputs(program, symbols, seed=5)
    expected = evaluate(program, inputs, symbols)
    (name,) = expected
    if framework == "torch":
        result = k(*(module.from_numpy(inputs[t.name]).cuda() for t in program.inputs))
        assert isinstance(result, module.Tensor) and result.is_cuda
        module.cuda.synchronize()
        actual = result.cpu().numpy()
    else:
        result = k(*(module.asarray(inputs[t.name]) for t in program.inputs))
        assert isinstance(result, module.ndarray)
        actual = module.asnumpy(result)
    np.testing.assert_allclose(actual, expected[name], rtol=1e-4, atol=1e-5)
