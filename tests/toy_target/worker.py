"""The toy target's worker facet: `gcc -O1` into a shared library, measured one thread at a
time by the CPU's sandboxed runner."""

from __future__ import annotations

from typing import Any

from tunehub.compiler.kernel import Kernel
from tunehub.schemas.target import Target
from tunehub.targets.cpu.runner import CpuRunner
from tunehub.worker.backend import WorkerBackend
from tunehub.worker.build.builder import Builder, BuildResult, build_shared_library

FLAGS = ("-O1", "-shared", "-fPIC")


class ToyBuilder(Builder):
    def build(self, kernel: Kernel, target: Target, timeout_s: float) -> BuildResult:
        command = ["gcc", *FLAGS]
        return build_shared_library(
            kernel.source, "kernel.c", command, timeout_s, {"flags": list(FLAGS)}, ["-lm"]
        )


class ToyWorker(WorkerBackend):
    def builder(self) -> ToyBuilder:
        return ToyBuilder()

    def runner(self, threads: int) -> CpuRunner:
        return CpuRunner(1)

    def local_targets(self) -> list[Target]:
        return [Target(kind="toy", isa="scalar")]

    def resolve(self, target: Target) -> Target:
        return target.with_detail("scalar")

    def cannot_measure(self, target: Target) -> str | None:
        return None

    def fingerprint(self, target: Target) -> dict[str, Any]:
        return {"compiler": "gcc -O1"}


BACKEND = ToyWorker()
