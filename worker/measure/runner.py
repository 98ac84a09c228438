"""The measure interface: run a built artifact on a test case, verify it, time it.

One runner per device kind (CPU via ctypes here, CUDA beside it); each runs kernels in a child
process with a deadline, so a crashing or hanging candidate costs one result, never the worker.
"""

from __future__ import annotations

import statistics
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from tunehub.schemas.record import RecordStatus
from tunehub.worker.measure.case import Case


@dataclass(frozen=True)
class MeasureResult:
    """`status` is OK, RUNTIME_ERROR, RUN_TIMEOUT or WRONG_ANSWER.

    `latencies_s` holds the per-call latency of every timed repeat (empty unless OK);
    `max_error` is the largest absolute error over the outputs, when they were compared.
    """

    status: RecordStatus
    latencies_s: list[float] = field(default_factory=list)
    log: str = ""
    max_error: float | None = None

    @property
    def latency_s(self) -> float | None:
        """The median repeat: robust to the odd interrupted batch on a shared machine."""
        if self.status is not RecordStatus.OK or not self.latencies_s:
            return None
        return statistics.median(self.latencies_s)


class Runner(ABC):
    @abstractmethod
    def run(
        self,
        artifact: bytes,
        metadata: dict[str, Any],
        case: Case,
        *,
        timeout_s: float,
        repeats: int,
        min_repeat_s: float,
    ) -> MeasureResult:
        """Measure `artifact` (its `Kernel.metadata()` says how to call it) on `case`.

        `timeout_s` bounds the kernel's part: loading, the checked run and the timed runs.
        A slow kernel gets fewer than `repeats` timed batches (at least one) to stay within it.
        """

    def close(self) -> None:  # noqa: B027 - runners without processes need no cleanup
        """Stop any child process this runner holds."""
