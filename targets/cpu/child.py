"""The measuring child process: load a kernel, check its output, time it.

Runs as `python -m tunehub.targets.cpu.child REQUEST_FD REPLY_FD`, started by a `Sandbox`, and
serves requests as `worker.measure.measuring` describes. A kernel that crashes takes only
this process down; the parent learns how far it got from the replies already sent.

Every buffer (inputs too) is 64-byte aligned and framed by guard bytes that are checked after
the runs, and the inputs are compared with a pristine copy: a kernel that writes out of bounds
or into its inputs is a runtime error, not a silent corruption of the next candidate.
"""

from __future__ import annotations

import _ctypes
import contextlib
import ctypes
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import numpy as np

from tunehub.schemas.record import RecordStatus
from tunehub.targets.cpu.harness import MAX_ARGS, Harness
from tunehub.targets.cpu.harness import load as load_harness
from tunehub.targets.cpu.runtime import allow_tiles
from tunehub.worker.measure import measuring
from tunehub.worker.measure.case import Case
from tunehub.worker.measure.runner import MeasureResult
from tunehub.worker.measure.sandboxed import Request

ALIGN = 64
GUARD = 4096
GUARD_BYTE = 0x5C
# No batch longer than this many calls, however fast a kernel claims to be.
MAX_CALLS = 1_000_000


@dataclass
class _Buffer:
    """A 64-byte aligned array inside a guarded allocation."""

    raw: np.ndarray
    array: np.ndarray
    start: int  # byte offset of `array` in `raw`

    @classmethod
    def like(cls, template: np.ndarray) -> _Buffer:
        nbytes = template.nbytes
        raw = np.full(nbytes + 2 * GUARD + ALIGN, GUARD_BYTE, np.uint8)
        start = GUARD + (-(raw.ctypes.data + GUARD)) % ALIGN
        array = raw[start : start + nbytes].view(template.dtype).reshape(template.shape)
        np.copyto(array, template)
        return cls(raw, array, start)

    def guards_intact(self) -> bool:
        end = self.start + self.array.nbytes
        return bool((self.raw[: self.start] == GUARD_BYTE).all()) and bool(
            (self.raw[end:] == GUARD_BYTE).all()
        )


@dataclass
class _Loaded(measuring.Loaded):
    buffers: dict[str, _Buffer] = field(default_factory=dict)  # inputs, as kernels see them


def main(argv: list[str]) -> None:
    # Kernels are unloaded after use; libgomp must stay, its thread pool outlives them.
    with contextlib.suppress(OSError):
        ctypes.CDLL("libgomp.so.1", mode=ctypes.RTLD_GLOBAL)
    allow_tiles()  # before any kernel: an AMX one's first tile instruction needs the state
    harness = load_harness()
    measuring.serve(
        argv,
        _load,
        lambda request, loaded: _measure(request, loaded, harness),
        "cannot load the test case",
    )


def _load(case: Case) -> _Loaded:
    loaded = _Loaded.of(case)
    loaded.buffers = {name: _Buffer.like(array) for name, array in loaded.inputs.items()}
    return loaded


def _measure(
    request: Request, loaded: _Loaded, harness: Harness | None
) -> Iterator[measuring.Reply]:
    meta = request.metadata
    stop = measuring.timing_deadline(request)
    lib = None
    try:
        outputs = {
            a["name"]: _Buffer.like(loaded.poisoned[a["name"]])
            for a in meta["args"]
            if a["role"] == "output"
        }
        buffers = [*loaded.buffers.values(), *outputs.values()]
        lib = ctypes.CDLL(request.artifact)
        call = _Call(lib, meta, {**loaded.buffers, **outputs}, request.case.symbols, harness)

        def check() -> tuple[float, str]:
            _check_memory(buffers, loaded)
            return measuring.compare_outputs(request, loaded, lambda name: outputs[name].array)

        yield from measuring.verified_runs(
            lambda: call.batch(1),
            check,
            lambda first_s: _time(call, request.repeats, request.min_repeat_s, first_s, stop),
        )
    except measuring.KernelError as exc:
        yield ("result", MeasureResult(RecordStatus.RUNTIME_ERROR, log=str(exc)))
    except Exception:
        yield ("result", measuring.failure("the measurement failed"))
    finally:
        if lib is not None:
            _ctypes.dlclose(lib._handle)


class _Call:
    """The kernel bound to its arguments, converted once rather than on every call."""

    def __init__(
        self,
        lib: ctypes.CDLL,
        meta: dict[str, Any],
        buffers: dict[str, _Buffer],
        symbols: Any,
        harness: Harness | None,
    ) -> None:
        fn = getattr(lib, meta["entry"])
        fn.restype = ctypes.c_int
        pointers = [buffers[a["name"]].array.ctypes.data for a in meta["args"]]
        sizes = [int(symbols[name]) for name in meta["symbols"]]
        self.fn = fn
        self.args = [ctypes.c_void_p(p) for p in pointers] + [ctypes.c_int64(s) for s in sizes]
        fn.argtypes = [type(a) for a in self.args]
        self.harness = harness if len(self.args) <= MAX_ARGS else None
        if self.harness is not None:
            self.address = ctypes.cast(fn, ctypes.c_void_p).value or 0
            self.argv = self.harness.arguments(pointers + sizes)

    def batch(self, number: int) -> float:
        """Seconds taken by `number` back-to-back calls; KernelError on a non-zero return."""
        start = perf_counter()
        if self.harness is not None:
            code = self.harness.repeat(self.address, self.argv, number)
        else:
            code = 0
            for _ in range(number):
                code = self.fn(*self.args)
                if code != 0:
                    break
        elapsed = perf_counter() - start
        if code != 0:
            raise measuring.KernelError(f"kernel returned {code}")
        return elapsed


def _check_memory(buffers: list[_Buffer], loaded: _Loaded) -> None:
    if not all(b.guards_intact() for b in buffers):
        raise measuring.KernelError("kernel wrote outside its buffers (guard bytes overwritten)")
    for name, buffer in loaded.buffers.items():
        if not np.array_equal(buffer.array.view(np.uint8), loaded.inputs[name].view(np.uint8)):
            raise measuring.KernelError(f"kernel wrote into its input {name!r}")


def _time(
    call: _Call, repeats: int, min_repeat_s: float, first_s: float, deadline: float
) -> list[float]:
    """Per-call latency of each of `repeats` batches, each batch at least `min_repeat_s` long.

    A short first call is followed by a warm-up batch (caches, the thread pool) that also
    calibrates the batch size; a long one was warm-up enough. A slow kernel gets fewer repeats
    (at least one) rather than running into the deadline: a latency is worth more than a
    timeout for a correct kernel.
    """
    number = _calls(min_repeat_s, first_s)
    if first_s < min_repeat_s:
        number = _calls(min_repeat_s, call.batch(number) / number)
    latencies: list[float] = []
    while len(latencies) < repeats:
        latencies.append(call.batch(number) / number)
        if perf_counter() + latencies[-1] * number > deadline:
            break
    return latencies


def _calls(min_repeat_s: float, per_call_s: float) -> int:
    return max(1, min(MAX_CALLS, math.ceil(min_repeat_s / max(per_call_s, 1e-9))))


if __name__ == "__main__":
    main(sys.argv)
