"""What a worker asks of a target kind: a builder, a runner, what this machine can measure,
and the device part of a fingerprint.

Each kind's `worker` facet (`tunehub.targets.<kind>.worker.BACKEND`, found through
`schemas.target.kinds`) implements this; the worker never tests a kind by name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunehub.schemas.target import Target, kind_of, kinds

if TYPE_CHECKING:
    from tunehub.compiler.ir import Program
    from tunehub.worker.build.builder import Builder
    from tunehub.worker.measure.runner import Runner


class WorkerBackend(ABC):
    """One target kind, as a worker sees it."""

    @abstractmethod
    def builder(self) -> Builder:
        """A builder of this kind's kernels (compile only: any machine with the toolchain)."""

    @abstractmethod
    def runner(self, threads: int) -> Runner:
        """A runner measuring with `threads` threads (a kind without threads ignores them)."""

    def runner_key(self, threads: int) -> Hashable:
        """Which runners of this kind a process keeps apart: one per thread count by
        default; a GPU's single runner holds the process's only CUDA context."""
        return threads

    @abstractmethod
    def local_targets(self) -> list[Target]:
        """What this machine builds and measures for, most capable first (empty if nothing)."""

    @abstractmethod
    def resolve(self, target: Target) -> Target:
        """`target` completed to what this machine measures (`cpu` -> `cpu:<isa>`);
        ValueError saying why it cannot measure it."""

    @abstractmethod
    def cannot_measure(self, target: Target) -> str | None:
        """Why this machine cannot measure kernels built for a complete `target` (None if
        it can): a kernel that would not run here is refused, never recorded as a crash."""

    def devices(self) -> list[str]:
        """This machine's devices of this kind that measure apart from each other (GPUs), by
        the ids `device_environment` takes: `tunehub worker --gpus` runs a measuring slot on
        each. Empty for a kind whose kernels run on the host (CPUs)."""
        return []

    def device_environment(self, device: str) -> dict[str, str]:
        """The environment that shows a process `device` (of `devices`) alone."""
        return {}

    @abstractmethod
    def fingerprint(self, target: Target) -> dict[str, Any]:
        """The device and toolchain a measurement for `target` here is taken with."""

    def library_baselines(
        self, program: Program, symbols: Mapping[str, int], threads: int
    ) -> list[Baseline]:
        """The libraries a user of this kind already has for `program`, timed here the way
        kernels are, fastest first; none where this worker has none to offer."""
        return []


@dataclass(frozen=True)
class Baseline:
    """A library's latency for a workload: the bar a tuned kernel has to clear."""

    library: str
    latency_s: float
    code: str = ""  # what was timed, for a user to time it too


def worker_backend(target: Target | str) -> WorkerBackend:
    """The worker facet of a target (or of a kind, by name)."""
    backend: WorkerBackend = kind_of(target if isinstance(target, str) else target.kind).facet(
        "worker"
    )
    return backend


def local_targets() -> list[Target]:
    """Every target this machine builds and measures for, kind by kind."""
    return [target for kind in kinds() for target in worker_backend(kind).local_targets()]
