"""What machine a worker is: its CPU instruction set, its GPUs, and the fingerprint every
record keeps.

A latency means little without the machine it was measured on, so each result carries the
fingerprint; the ISA decides which builds this worker may run (an AVX-512 binary dies with
SIGILL on an AVX2 host, and that must be refused, not recorded as a crashing kernel), and so
does a GPU's architecture for cubins.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

from schemas.target import Target
from worker.build.cuda import nvcc_version

_CPUINFO = Path("/proc/cpuinfo")
_ROOT = str(Path(__file__).resolve().parents[1])  # the child imports tunehub from here
_AVX512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
_AVX2 = {"avx2", "fma"}
# x86 ISAs in increasing order: a host runs its own level and every level below it.
_X86_LEVELS = ("generic", "x86_64", "x86_64-avx2", "x86_64-avx512")


@cache
def _cpuinfo() -> dict[str, str]:
    """The first processor's `key: value` lines of /proc/cpuinfo (empty where there is none)."""
    info: dict[str, str] = {}
    try:
        text = _CPUINFO.read_text()
    except OSError:
        return info
    for line in text.splitlines():
        if not line.strip():
            if info:
                break
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def isa_from_flags(machine: str, flags: set[str]) -> str:
    """The best tunehub CPU ISA of a machine (`platform.machine()`) with these cpuinfo flags."""
    if machine in ("aarch64", "arm64"):
        return "aarch64-neon"
    if machine not in ("x86_64", "amd64", "AMD64"):
        return "generic"
    if flags >= _AVX512:
        return "x86_64-avx512"
    if flags >= _AVX2:
        return "x86_64-avx2"
    return "x86_64"


@cache
def cpu_isa() -> str:
    """The instruction set this host runs, e.g. `x86_64-avx512`."""
    return isa_from_flags(platform.machine(), set(_cpuinfo().get("flags", "").split()))


def can_run(isa: str, host: str | None = None) -> bool:
    """Whether code built for `isa` runs on a `host` ISA (by default, this host's)."""
    host = host or cpu_isa()
    if isa == host or isa == "generic":
        return True
    if host in _X86_LEVELS and isa in _X86_LEVELS:
        return _X86_LEVELS.index(isa) <= _X86_LEVELS.index(host)
    return False


@cache
def _version(*command: str) -> str | None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else None


def cpu_cores() -> int:
    """Cores this process may use (its affinity mask, which a container may narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def fingerprint(target: Target, threads: int) -> dict[str, Any]:
    """The machine a measurement for `target` with `threads` threads was taken on."""
    common: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "cpu_model": _cpuinfo().get("model name") or platform.processor() or platform.machine(),
        "cpu_cores": cpu_cores(),
        "cpu_isa": cpu_isa(),
        "threads": threads,
    }
    if target.kind == "cpu":
        return {**common, "compiler": "gcc " + (_version("gcc", "-dumpfullversion") or "?")}
    # A build-only machine has no GPU: its CUDA fingerprint names the toolchain alone.
    gpu = next((g for g in gpus() if target.arch and can_run_cuda(target.arch, g["gpu_arch"])), {})
    return {**common, **gpu, "compiler": f"nvcc {nvcc_version() or '?'}"}


@cache
def gpus() -> tuple[dict[str, Any], ...]:
    """This machine's visible GPUs (name, arch, SM count, memory, L2, driver version), asked
    through cuda-python in a child process: no CUDA context may exist in a worker before it
    forks. Empty without a driver or a GPU."""
    command = [sys.executable, "-m", "worker.measure.gpu"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")])),
    }
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
        return tuple(json.loads(done.stdout)["devices"])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return ()


def can_run_cuda(arch: str, gpu_arch: str) -> bool:
    """Whether a cubin for `arch` runs on a GPU of `gpu_arch`: SASS runs on its own major
    version at an equal or higher minor; the `a` (architecture-specific) targets only on
    their own."""
    if arch.endswith("a") or gpu_arch.endswith("a"):
        return arch.rstrip("a") == gpu_arch.rstrip("a")
    major, minor = divmod(int(arch[3:]), 10)
    gpu_major, gpu_minor = divmod(int(gpu_arch[3:]), 10)
    return major == gpu_major and minor <= gpu_minor
