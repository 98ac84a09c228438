"""The measuring child for CUDA kernels: on a GPU (`targets.cuda.gpu`) or on the CPU
emulator (`targets.cuda.emulated.Emulator`), one verification path for both.

Runs as `python -m tunehub.targets.cuda.child REQUEST_FD REPLY_FD`, started by a `Sandbox`,
and serves requests as `worker.measure.measuring` describes (the device is opened as part of
the set-up, before `ready`).

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
import functools
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Protocol

import numpy as np

from tunehub.schemas.record import RecordStatus
from tunehub.targets.cuda.launch import kernel_params, launch_plan, workspace_bytes
from tunehub.targets.cuda.tensor_map import Encoded, TensorMap, tensor_maps
from tunehub.worker.measure import measuring
from tunehub.worker.measure.runner import MeasureResult
from tunehub.worker.measure.sandboxed import Request

GUARD = 4096  # keeps the data 256-byte aligned, as cuMemAlloc's pointers are
GUARD_BYTE = 0x5C
WORKSPACE_BYTE = 0xFF
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
    def tensor_map(self, tensor_map: TensorMap, address: int) -> Encoded: ...
    def time_calls(self, call: Callable[[], None], number: int) -> float: ...
    def release(self) -> None: ...


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
            raise measuring.KernelError(
                "kernel wrote outside its buffers (guard bytes overwritten)"
            )
        return raw[GUARD : GUARD + self.nbytes]


def main(argv: list[str]) -> None:
    measuring.serve(
        argv,
        measuring.Loaded.of,
        lambda request, loaded: _measure(request, loaded, _device(request.backend)),
        "cannot set up the measurement",
    )


@functools.cache
def _device(backend: str) -> Device:
    """One per backend for the child's life. Imported here: only a GPU child may load
    cuda-python's driver and create a context."""
    if backend == "gpu":
        from tunehub.targets.cuda.gpu import Gpu

        return Gpu()
    from tunehub.targets.cuda.emulated import Emulator

    return Emulator()


def _measure(
    request: Request, loaded: measuring.Loaded, device: Device
) -> Iterator[measuring.Reply]:
    meta, symbols = request.metadata, request.case.symbols
    stop = measuring.timing_deadline(request)
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
        maps = [device.tensor_map(m, regions[m.arg].address) for m in tensor_maps(meta, symbols)]
        params = kernel_params(
            [regions[a["name"]].address for a in meta["args"]],
            [w.address for w in workspaces],
            symbols,
            meta["symbols"],
            maps,
        )
        plan = launch_plan(meta["launch"]["kernels"], symbols)

        def call() -> None:
            for entry, grid, block, shared_bytes in plan:
                device.launch(entry, grid, block, shared_bytes, params)

        def first_run() -> float:
            start = perf_counter()
            call()
            device.synchronize()
            return perf_counter() - start

        yield from measuring.verified_runs(
            first_run,
            lambda: _verify(device, request, loaded, inputs, outputs, workspaces),
            lambda first_s: _time(device, call, request, stop),
        )
    except Exception as exc:
        if isinstance(exc, (measuring.KernelError, *device.errors)):
            yield ("result", MeasureResult(RecordStatus.RUNTIME_ERROR, log=str(exc)))
        else:
            yield ("result", measuring.failure("the measurement failed"))
    finally:
        # After a fault the context refuses everything; the parent replaces this process.
        with contextlib.suppress(Exception):
            device.release()


def _verify(
    device: Device,
    request: Request,
    loaded: measuring.Loaded,
    inputs: dict[str, _Region],
    outputs: dict[str, _Region],
    workspaces: list[_Region],
) -> tuple[float, str]:
    """(max abs error over the outputs, mismatch message or ""); KernelError for a kernel
    that wrote outside its buffers or into an input."""
    for workspace in workspaces:
        workspace.contents(device)
    for name, region in inputs.items():
        if not np.array_equal(
            region.contents(device), loaded.inputs[name].reshape(-1).view(np.uint8)
        ):
            raise measuring.KernelError(f"kernel wrote into its input {name!r}")

    def actual(name: str) -> np.ndarray:
        expected = loaded.expected[name]
        return outputs[name].contents(device).view(expected.dtype).reshape(expected.shape)

    return measuring.compare_outputs(request, loaded, actual)


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


if __name__ == "__main__":
    main(sys.argv)
