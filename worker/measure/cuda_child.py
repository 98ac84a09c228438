"""The measuring child for CUDA kernels: on a GPU (`worker.measure.gpu`) or on the CPU
emulator (`worker.measure.emulated.Emulator`), one verification path for both.

Runs as `python -m worker.measure.cuda_child REQUEST_FD REPLY_FD`, started by a `Sandbox`,
with the replies of `worker.measure.child`: `("ready",)` once the case is loaded, `("checked",
max_error, first_call_s)` after the first run was verified, then `("result", MeasureResult)`.

A candidate follows its `Kernel.launch` metadata exactly as a user of the kernel would:
inputs uploaded, outputs poisoned, workspaces filled with 0xFF bytes (a NaN in every float
width, so a read of an unwritten workspace shows), then the kernels launched in order, each
with every argument (inputs, outputs, workspaces, int64 symbols) and its grid evaluated from
the symbols (a grid with a zero extent is skipped, as launching it would be an error). Every
buffer is framed by guard bytes, checked after the runs with the inputs, so a kernel that
writes out of bounds or into its inputs is a runtime error. The outputs are compared again
after the timed runs (races between blocks or threads that one run missed).

The emulator (`device.timed` false) runs the kernels a second time instead of timing them.
"""

from __future__ import annotations

import contextlib
import math
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from time import perf_counter
from typing import Any, Protocol

import numpy as np

from compiler import verify
from compiler.inputs import output_buffers
from schemas.record import RecordStatus
from worker.measure.case import Case
from worker.measure.launch import kernel_params, launch_plan, workspace_bytes
from worker.measure.runner import MeasureResult
from worker.measure.sandboxed import Request

GUARD = 4096  # keeps the data 256-byte aligned, as cuMemAlloc's pointers are
GUARD_BYTE = 0x5C
WORKSPACE_BYTE = 0xFF
# Timed repeats stop early once this share of the run timeout is spent.
TIME_SHARE = 0.7
# Calls per timed repeat, at most: each is timed on its own, so a few suffice.
MAX_CALLS = 100


class Device(Protocol):
    """What the flow needs of a GPU or of the emulator. Addresses are plain integers."""

    timed: bool
    errors: tuple[type[Exception], ...]  # failures of the kernel or its launch

    def load(self, artifact: str, kernels: Sequence[dict[str, Any]]) -> None: ...
    def alloc(self, nbytes: int) -> int: ...
    def write(self, address: int, data: np.ndarray) -> None: ...
    def read(self, address: int, out: np.ndarray) -> None: ...
    def launch(
        self,
        entry: str,
        grid: Sequence[int],
        block: Sequence[int],
        shared_bytes: int,
        params: Sequence[Any],
    ) -> None: ...
    def synchronize(self) -> None: ...
    def time_calls(self, call: Callable[[], None], number: int) -> float: ...
    def release(self) -> None: ...


class KernelError(Exception):
    """The kernel misbehaved (wrote out of bounds or into an input): a runtime error."""


@dataclass(frozen=True)
class _Region:
    """A device buffer framed by guard bytes; the kernel sees `address`."""

    base: int
    nbytes: int

    @property
    def address(self) -> int:
        return self.base + GUARD

    @classmethod
    def holding(cls, device: Device, data: np.ndarray) -> _Region:
        raw = np.full(data.nbytes + 2 * GUARD, GUARD_BYTE, np.uint8)
        raw[GUARD : GUARD + data.nbytes] = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        region = cls(device.alloc(raw.nbytes), data.nbytes)
        device.write(region.base, raw)
        return region

    def contents(self, device: Device) -> np.ndarray:
        """The data bytes; KernelError if a guard byte changed."""
        raw = np.empty(self.nbytes + 2 * GUARD, np.uint8)
        device.read(self.base, raw)
        if not (
            (raw[:GUARD] == GUARD_BYTE).all() and (raw[GUARD + self.nbytes :] == GUARD_BYTE).all()
        ):
            raise KernelError("kernel wrote outside its buffers (guard bytes overwritten)")
        return raw[GUARD : GUARD + self.nbytes]


@dataclass
class _Loaded:
    key: tuple[Any, ...]
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    poisoned: dict[str, np.ndarray]


def main(argv: list[str]) -> None:
    requests = Connection(int(argv[1]), writable=False)
    replies = Connection(int(argv[2]), readable=False)
    devices: dict[str, Device] = {}
    loaded: _Loaded | None = None
    while True:
        try:
            request = requests.recv()
        except EOFError:
            return
        try:
            if loaded is None or loaded.key != request.case.key:
                loaded = None  # free the previous case before reading the next
                loaded = _load(request.case)
            if request.backend not in devices:
                devices[request.backend] = _device(request.backend)
        except Exception:
            replies.send(("result", _failure("cannot set up the measurement")))
            continue
        replies.send(("ready",))
        for message in _measure(request, loaded, devices[request.backend]):
            replies.send(message)


def _device(backend: str) -> Device:
    """Imported here: only a GPU child may load cuda-python's driver and create a context."""
    if backend == "gpu":
        from worker.measure.gpu import Gpu

        return Gpu()
    from worker.measure.emulated import Emulator

    return Emulator()


def _load(case: Case) -> _Loaded:
    inputs, expected = case.load()
    poisoned = output_buffers(case.program, dict(case.symbols), poison=True)
    return _Loaded(case.key, inputs, expected, poisoned)


def _measure(request: Request, loaded: _Loaded, device: Device) -> Iterator[tuple[Any, ...]]:
    meta, symbols = request.metadata, request.case.symbols
    deadline = perf_counter() + TIME_SHARE * request.timeout_s
    try:
        device.load(request.artifact, meta["launch"]["kernels"])
        inputs = {name: _Region.holding(device, array) for name, array in loaded.inputs.items()}
        outputs = {
            a["name"]: _Region.holding(device, loaded.poisoned[a["name"]])
            for a in meta["args"]
            if a["role"] == "output"
        }
        workspaces = [
            _Region.holding(device, np.full(nbytes, WORKSPACE_BYTE, np.uint8))
            for nbytes in workspace_bytes(meta["launch"], symbols)
        ]
        regions = {**inputs, **outputs}
        params = kernel_params(
            [regions[a["name"]].address for a in meta["args"]],
            [w.address for w in workspaces],
            symbols,
            meta["symbols"],
        )
        plan = launch_plan(meta["launch"]["kernels"], symbols)

        def call() -> None:
            for entry, grid, block, shared_bytes in plan:
                device.launch(entry, grid, block, shared_bytes, params)

        start = perf_counter()
        call()
        device.synchronize()
        first_s = perf_counter() - start
        max_error, wrong = _verify(device, loaded, inputs, outputs, workspaces, meta, request)
        if wrong:
            yield (
                "result",
                MeasureResult(RecordStatus.WRONG_ANSWER, log=wrong, max_error=max_error),
            )
            return
        yield ("checked", max_error, first_s)
        latencies = _time(device, call, request, deadline)
        max_error_2, wrong = _verify(device, loaded, inputs, outputs, workspaces, meta, request)
        if wrong:
            log = f"output changed after repeated runs (a race?): {wrong}"
            yield (
                "result",
                MeasureResult(RecordStatus.WRONG_ANSWER, log=log, max_error=max_error_2),
            )
            return
        yield ("result", MeasureResult(RecordStatus.OK, latencies, max_error=max_error))
    except Exception as exc:
        if isinstance(exc, (KernelError, *device.errors)):
            yield ("result", MeasureResult(RecordStatus.RUNTIME_ERROR, log=str(exc)))
        else:
            yield ("result", _failure("the measurement failed"))
    finally:
        # After a fault the context refuses everything; the parent replaces this process.
        with contextlib.suppress(Exception):
            device.release()


def _verify(
    device: Device,
    loaded: _Loaded,
    inputs: dict[str, _Region],
    outputs: dict[str, _Region],
    workspaces: list[_Region],
    meta: dict[str, Any],
    request: Request,
) -> tuple[float, str]:
    """(max abs error over the outputs, mismatch message or ""); KernelError for a kernel
    that wrote outside its buffers or into an input."""
    for workspace in workspaces:
        workspace.contents(device)
    for name, region in inputs.items():
        if not np.array_equal(
            region.contents(device), loaded.inputs[name].reshape(-1).view(np.uint8)
        ):
            raise KernelError(f"kernel wrote into its input {name!r}")
    max_error, wrong = 0.0, []
    for arg in meta["args"]:
        name = arg["name"]
        if arg["role"] != "output":
            continue
        expected = loaded.expected[name]
        actual = outputs[name].contents(device).view(expected.dtype).reshape(expected.shape)
        result = verify.compare(
            expected, actual, arg["dtype"], reduce_extent=request.reduce_extents[name]
        )
        max_error = max(max_error, result.max_abs_err)
        if not result.ok:
            wrong.append(f"{name}: {result.message}")
    return max_error, "; ".join(wrong)


def _time(
    device: Device, call: Callable[[], None], request: Request, deadline: float
) -> list[float]:
    """Per-call latency of each of `request.repeats` repeats of calls lasting at least
    `min_repeat_s` together (at most MAX_CALLS), after a warm-up call that calibrates them.
    The emulator runs the kernels once more instead (the race check), untimed."""
    if not device.timed:
        call()
        device.synchronize()
        return []
    per_call = device.time_calls(call, 1)
    number = max(1, min(MAX_CALLS, math.ceil(request.min_repeat_s / max(per_call, 1e-7))))
    latencies: list[float] = []
    while len(latencies) < request.repeats:
        started = perf_counter()
        latencies.append(device.time_calls(call, number))
        if 2 * perf_counter() - started > deadline:  # the next repeat would not fit
            break
    return latencies


def _failure(what: str) -> MeasureResult:
    return MeasureResult(RecordStatus.RUNTIME_ERROR, log=f"{what}:\n{traceback.format_exc()}")


if __name__ == "__main__":
    main(sys.argv)
