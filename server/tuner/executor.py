"""Executors: where the tuner's candidates get built and measured.

The tuner hands an executor a batch of `CandidateRequest`s and gets one `CandidateResult` back
per request, in order, failures included; it never knows where the work ran. `LocalExecutor`
(this machine, a process pool) is the embedded default; the RQ executor (build and measure
queues consumed by worker daemons) implements the same interface beside it.
"""

from __future__ import annotations

import multiprocessing
import signal
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from types import TracebackType
from typing import Self

from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.worker import device
from tunehub.worker.backend import worker_backend
from tunehub.worker.jobs import (
    CandidateRequest,
    CandidateResult,
    build_candidate,
    measure_candidate,
)


class Executor(ABC):
    """Builds and measures candidates somewhere; a context manager that releases its workers."""

    @property
    @abstractmethod
    def parallelism(self) -> int:
        """How many candidates can build at once (the tuner sizes its batches by it)."""

    @abstractmethod
    def resolve(self, target: Target) -> Target:
        """`target` completed to what this executor's machines are (`cpu` -> `cpu:<isa>`);
        records always name a complete target. Raises ValueError when no machine fits."""

    @abstractmethod
    def run(self, requests: Sequence[CandidateRequest]) -> list[CandidateResult]:
        """Build and measure every request; one result per request, in order."""

    def stored(self) -> None:  # noqa: B027 - executors that keep no results have none to drop
        """The results `run` returned are in the database: what still holds them may go."""

    def close(self) -> None:  # noqa: B027 - executors without workers have nothing to release
        """Release workers and processes."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class LocalExecutor(Executor):
    """This machine: builds in a process pool (lowering is Python and gcc or nvcc a
    subprocess, so both use every core), then measurements one at a time with nothing else
    running, since concurrent timings on a small machine measure each other.

    Measuring happens in this process through `worker.jobs.measure_candidate`, which runs each
    kernel in its own sandboxed child (for `cuda` targets, the GPU runner's, which holds the
    only CUDA context): a crashing candidate costs one result, never the tuner.
    """

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or device.cpu_cores()
        self._pool: ProcessPoolExecutor | None = None

    @property
    def parallelism(self) -> int:
        return self.workers

    def resolve(self, target: Target) -> Target:
        return worker_backend(target).resolve(target)

    def run(self, requests: Sequence[CandidateRequest]) -> list[CandidateResult]:
        futures = [self._get_pool().submit(build_candidate, r) for r in requests]
        built = [self._built(f) for f in futures]
        return [measure_candidate(r, b) for r, b in zip(requests, built, strict=True)]

    def _built(self, future: Future[CandidateResult]) -> CandidateResult:
        try:
            return future.result()
        except BrokenProcessPool:
            # A build process died (out of memory, a signal): the pool is unusable, so the
            # next batch gets a fresh one; this candidate is recorded as a compile error.
            self.close()
            return CandidateResult(RecordStatus.COMPILE_ERROR, log="the build process died")

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = spawn_pool(self.workers)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def spawn_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of the tuner's helper processes (builds, feature extraction): spawned, not
    forked, since the tuner's process may run threads (a progress bar, a database pool) that
    a fork would copy mid-operation."""
    context = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(workers, mp_context=context, initializer=_ignore_interrupts)


def _ignore_interrupts() -> None:
    """Helper processes leave Ctrl-C to the tuner, which shuts the pool down cleanly
    (otherwise every one of them would print its own KeyboardInterrupt traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
