"""This machine's CUDA GPUs, and which of them run a cubin built for an arch.

The GPUs are asked through cuda-python in a child process: no CUDA context may exist in a
worker before it forks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from typing import Any

from tunehub.worker.measure.sandbox import child_environment

# A JSON list of GPUs (as `python -m tunehub.targets.cuda.gpu` lists them) that stands for the
# driver's answer: the multi-GPU worker's tests run its slots on machines without GPUs.
FAKE_GPUS_ENV = "TUNEHUB_FAKE_GPUS"


@cache
def gpus() -> tuple[dict[str, Any], ...]:
    """This machine's visible GPUs (name, arch, SM count, memory, L2, driver version). Empty
    without a driver or a GPU."""
    fake = os.environ.get(FAKE_GPUS_ENV)
    if fake is not None:
        return _visible(tuple(json.loads(fake)))
    command = [sys.executable, "-m", "tunehub.targets.cuda.gpu"]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=60, env=child_environment()
        )
        return tuple(json.loads(done.stdout)["devices"])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return ()


def _visible(found: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
    """The GPUs `CUDA_VISIBLE_DEVICES` (ordinals) leaves visible, in its order, as the driver
    shows them."""
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if chosen is None:
        return found
    ordinals = [int(part) for part in chosen.split(",") if part.strip().isdigit()]
    return tuple(found[i] for i in ordinals if i < len(found))


def can_run_cuda(arch: str, gpu_arch: str) -> bool:
    """Whether a cubin for `arch` runs on a GPU of `gpu_arch`: SASS runs on its own major
    version at an equal or higher minor; the `a` (architecture-specific) targets only on
    their own."""
    if arch.endswith("a") or gpu_arch.endswith("a"):
        return arch.rstrip("a") == gpu_arch.rstrip("a")
    major, minor = divmod(int(arch[3:]), 10)
    gpu_major, gpu_minor = divmod(int(gpu_arch[3:]), 10)
    return major == gpu_major and minor <= gpu_minor


def gpu_for(arch: str) -> dict[str, Any] | None:
    """The first GPU here that runs `arch` code."""
    return next((g for g in gpus() if can_run_cuda(arch, g["gpu_arch"])), None)


def gpu_archs() -> str:
    """This machine's GPU archs, for messages ("none" without one)."""
    return ", ".join(g["gpu_arch"] for g in gpus()) or "none"
