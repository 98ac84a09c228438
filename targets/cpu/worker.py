"""The CPU target as a worker sees it: gcc builds (`build`), a sandboxed ctypes runner with
OpenMP threads (`runner`), and the host's ISA (`worker.device`) deciding what it measures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunehub.compiler.ir import Program
from tunehub.schemas.target import Target
from tunehub.targets.cpu.build import CpuBuilder
from tunehub.targets.cpu.runner import CpuRunner
from tunehub.worker import device
from tunehub.worker.backend import Baseline, WorkerBackend
from tunehub.worker.measure.library import library_baselines


class CpuWorker(WorkerBackend):
    def builder(self) -> CpuBuilder:
        return CpuBuilder()

    def runner(self, threads: int) -> CpuRunner:
        return CpuRunner(threads)

    def local_targets(self) -> list[Target]:
        return [Target(kind="cpu", isa=device.cpu_isa())]

    def resolve(self, target: Target) -> Target:
        isa = target.isa or device.cpu_isa()
        if not device.can_run(isa):
            raise ValueError(f"this machine ({device.cpu_isa()}) cannot run {isa} code")
        return target.with_detail(isa)

    def cannot_measure(self, target: Target) -> str | None:
        if target.isa is not None and not device.can_run(target.isa):
            return f"this worker ({device.cpu_isa()}) cannot run {target.isa} code"
        return None

    def fingerprint(self, target: Target) -> dict[str, Any]:
        compiler = "gcc " + (device.tool_version("gcc", "-dumpfullversion") or "?")
        return {"compiler": compiler, "toolkit": compiler}

    def library_baselines(
        self, program: Program, symbols: Mapping[str, int], threads: int
    ) -> list[Baseline]:
        """numpy, with BLAS for the sums of products, and torch on the CPU where it is
        installed (`worker.measure.library`)."""
        return library_baselines(program, symbols, threads)


BACKEND = CpuWorker()
