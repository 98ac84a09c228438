"""What both measuring children (`targets.cpu.child` for CPU kernels,
`targets.cuda.child` for CUDA ones) do alike, so that they keep one protocol.

A child serves one `Request` at a time until its request pipe closes, holding the current test
case in memory across candidates of one workload. It replies `("ready",)` once the request is
set up (the parent's run deadline starts there), `("checked", max_error, first_call_s)` after
the first run was verified, then `("result", MeasureResult)`; outputs are verified again after
the timed runs, which catches races between threads that one run missed.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from time import perf_counter
from typing import Any, Self, TypeVar

import numpy as np

from tunehub.compiler import verify
from tunehub.compiler.inputs import output_buffers
from tunehub.schemas.record import RecordStatus
from tunehub.worker.measure.case import Case
from tunehub.worker.measure.runner import MeasureResult
from tunehub.worker.measure.sandboxed import Request

Reply = tuple[Any, ...]
# Timed repeats stop early once this share of the run timeout is spent.
TIME_SHARE = 0.7


class KernelError(Exception):
    """The kernel misbehaved (a non-zero return, a write out of bounds or into an input): a
    runtime error."""


@dataclass
class Loaded:
    """A case held in memory across candidates of one workload."""

    key: tuple[Any, ...]  # Case.key of the case held
    inputs: dict[str, np.ndarray]  # pristine
    expected: dict[str, np.ndarray]
    poisoned: dict[str, np.ndarray]  # the outputs as a kernel gets them

    @classmethod
    def of(cls, case: Case) -> Self:
        inputs, expected = case.load()
        poisoned = output_buffers(case.program, dict(case.symbols), poison=True)
        return cls(case.key, inputs, expected, poisoned)


L = TypeVar("L", bound=Loaded)


def serve(
    argv: list[str],
    load: Callable[[Case], L],
    measure: Callable[[Request, L], Iterator[Reply]],
    setup_failure: str,
) -> None:
    """Answer the requests of pipe `argv[1]` on pipe `argv[2]` until the parent closes it.

    `measure(request, loaded)` is called before `ready` is sent, so what it does eagerly (open
    a device) is set-up like loading the case, reported as `setup_failure` when it fails; the
    measurement itself runs as its replies are taken."""
    requests = Connection(int(argv[1]), writable=False)
    replies = Connection(int(argv[2]), readable=False)
    loaded: L | None = None
    while True:
        try:
            request = requests.recv()
        except EOFError:
            return
        try:
            if loaded is None or loaded.key != request.case.key:
                loaded = None  # free the previous case before reading the next
                loaded = load(request.case)
            messages = measure(request, loaded)
        except Exception:
            replies.send(("result", failure(setup_failure)))
            continue
        replies.send(("ready",))
        for message in messages:
            replies.send(message)


def timing_deadline(request: Request) -> float:
    """When timing must stop: the parent kills the child at ready + timeout_s, and the final
    checks need room."""
    return perf_counter() + TIME_SHARE * request.timeout_s


def verified_runs(
    first_run: Callable[[], float],
    check: Callable[[], tuple[float, str]],
    timed_runs: Callable[[float], list[float]],
) -> Iterator[Reply]:
    """The replies of one measurement: `first_run` (its seconds), `check` of the memory and
    the outputs ((max abs error, mismatch message or "")), `timed_runs` given the first run's
    seconds (the latencies), and `check` again."""
    first_s = first_run()
    max_error, wrong = check()
    if wrong:
        yield ("result", MeasureResult(RecordStatus.WRONG_ANSWER, log=wrong, max_error=max_error))
        return
    yield ("checked", max_error, first_s)
    latencies = timed_runs(first_s)
    max_error_2, wrong = check()
    if wrong:
        log = f"output changed after repeated runs (a race?): {wrong}"
        yield ("result", MeasureResult(RecordStatus.WRONG_ANSWER, log=log, max_error=max_error_2))
        return
    yield ("result", MeasureResult(RecordStatus.OK, latencies, max_error=max_error))


def compare_outputs(
    request: Request, loaded: Loaded, actual: Callable[[str], np.ndarray]
) -> tuple[float, str]:
    """(max abs error over the outputs, mismatch message or ""): each output, as `actual`
    gives it by name, against the reference."""
    max_error, wrong = 0.0, []
    for arg in request.metadata["args"]:
        name = arg["name"]
        if arg["role"] != "output":
            continue
        result = verify.compare(
            loaded.expected[name],
            actual(name),
            arg["dtype"],
            reduce_extent=request.reduce_extents[name],
        )
        max_error = max(max_error, result.max_abs_err)
        if not result.ok:
            wrong.append(f"{name}: {result.message}")
    return max_error, "; ".join(wrong)


def failure(what: str) -> MeasureResult:
    """A Python-level failure inside the child: the traceback is the log."""
    return MeasureResult(RecordStatus.RUNTIME_ERROR, log=f"{what}:\n{traceback.format_exc()}")
