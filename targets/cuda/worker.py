"""The CUDA target as a worker sees it: nvcc and ptxas builds (`build`), a sandboxed runner
holding the process's only CUDA context (`runner`), and this machine's GPUs (`device`)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from tunehub.schemas.record import UNKNOWN_DEVICE
from tunehub.schemas.target import Target
from tunehub.targets.cuda import device
from tunehub.targets.cuda.build import CudaBuilder, nvcc_version
from tunehub.targets.cuda.runner import CudaRunner
from tunehub.worker.backend import WorkerBackend


class CudaWorker(WorkerBackend):
    def builder(self) -> CudaBuilder:
        return CudaBuilder()

    def runner(self, threads: int) -> CudaRunner:
        return CudaRunner()

    def runner_key(self, threads: int) -> Hashable:
        return None

    def local_targets(self) -> list[Target]:
        """Each arch of this machine's GPUs once; none without a GPU."""
        archs = dict.fromkeys(gpu["gpu_arch"] for gpu in device.gpus())
        return [Target(kind="cuda", arch=arch) for arch in archs]

    def resolve(self, target: Target) -> Target:
        """`cuda` -> `cuda:<arch of the first GPU here>`; a named arch must run on one."""
        gpus = device.gpus()
        if not gpus:
            raise ValueError(
                f"this machine has no CUDA GPU (none visible to cuda-python): {target} needs one "
                "to measure on; tune it on a GPU machine or through workers that have one"
            )
        arch = target.arch or gpus[0]["gpu_arch"]
        if device.gpu_for(arch) is None:
            raise ValueError(
                f"no GPU of this machine runs {arch} code (its GPUs: {device.gpu_archs()})"
            )
        if nvcc_version() is None:
            raise ValueError(
                f"this machine has GPUs ({device.gpu_archs()}) but no nvcc to build for them"
            )
        return target.with_detail(arch)

    def devices(self) -> list[str]:
        """The visible GPUs' ordinals."""
        return [str(ordinal) for ordinal in range(len(device.gpus()))]

    def device_environment(self, device: str) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": device}

    def cannot_measure(self, target: Target) -> str | None:
        if target.arch is not None and device.gpu_for(target.arch) is None:
            return (
                f"this worker has no GPU that runs {target.arch} code "
                f"(its GPUs: {device.gpu_archs()})"
            )
        return None

    def fingerprint(self, target: Target) -> dict[str, Any]:
        """A build-only machine has no GPU: its fingerprint names the toolchain alone."""
        gpu = device.gpu_for(target.arch) if target.arch else None
        toolkit = f"nvcc {nvcc_version() or '?'}"
        identity = {
            "device": gpu["gpu_name"] if gpu else UNKNOWN_DEVICE,
            "driver": gpu.get("driver_version") if gpu else None,
            "toolkit": toolkit,
        }
        return {**(gpu or {}), **identity, "compiler": toolkit}


BACKEND = CudaWorker()
