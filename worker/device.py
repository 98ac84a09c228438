"""What machine a worker is: its CPU, its instruction set, and the fingerprint every record
keeps (each target kind adds its device to it: `WorkerBackend.fingerprint`).

A latency means little without the machine it was measured on, so each result carries the
fingerprint; the ISA decides which builds this worker may run (an AVX-512 binary dies with
SIGILL on an AVX2 host, and that must be refused, not recorded as a crashing kernel), as a
GPU's architecture does for cubins (`targets.cuda.device`).
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from tunehub.schemas.target import CPU_FEATURES, Target, kind_of
from tunehub.worker.backend import worker_backend

_CPUINFO = Path("/proc/cpuinfo")
_AVX512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
_AVX2 = {"avx2", "fma"}
# x86 ISAs in increasing order: a host runs its own level and every level below it.
_X86_LEVELS = ("generic", "x86_64", "x86_64-avx2", "x86_64-avx512")
# The lowest ISA level whose registers each feature's instructions use (its cpuinfo flag has
# the feature's name): VEX-encoded AVX-VNNI on AVX2's, the others on AVX-512's (AMX's tiles
# are loaded from and stored to memory, but every AMX CPU has AVX-512 and its kernels use it).
_FEATURE_LEVEL = {f: "x86_64-avx2" if f == "avx_vnni" else "x86_64-avx512" for f in CPU_FEATURES}


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
    base = "x86_64-avx512" if flags >= _AVX512 else "x86_64-avx2" if flags >= _AVX2 else "x86_64"
    return with_features(base, flags)


def with_features(base: str, flags: set[str]) -> str:
    """`base` with the features among `flags` that its registers allow, in their order."""
    level = _X86_LEVELS.index(base) if base in _X86_LEVELS else -1
    found = [
        f for f in CPU_FEATURES if f in flags and _X86_LEVELS.index(_FEATURE_LEVEL[f]) <= level
    ]
    return "+".join([base, *found])


# Caps the ISA this host reports (a worker that should build and measure AVX2 code on an
# AVX-512 machine; the test suite run as an AVX2-only machine would run it).
ISA_ENV = "TUNEHUB_CPU_ISA"


@cache
def cpu_isa() -> str:
    """The instruction set this host runs, its features included (e.g.
    `x86_64-avx512+avx512_vnni+avx512_bf16`), or the lower one named by TUNEHUB_CPU_ISA (a
    base alone runs none of the features)."""
    native = isa_from_flags(platform.machine(), set(_cpuinfo().get("flags", "").split()))
    capped = os.environ.get(ISA_ENV)
    if not capped:
        return native
    if not _runs_on(capped, native):
        raise RuntimeError(f"{ISA_ENV}={capped} is not an ISA this {native} host can run")
    return capped


def can_run(isa: str, host: str | None = None) -> bool:
    """Whether code built for `isa` runs on a `host` ISA (by default, this host's)."""
    return _runs_on(isa, host or cpu_isa())


def _runs_on(isa: str, host: str) -> bool:
    """Whether `host` runs `isa`'s base level and has every feature `isa` names."""
    cpu = kind_of("cpu")
    (base, features), (host_base, host_features) = cpu.split(isa), cpu.split(host)
    if not set(features) <= set(host_features):
        return False
    if base == host_base or base == "generic":
        return True
    if host_base in _X86_LEVELS and base in _X86_LEVELS:
        return _X86_LEVELS.index(base) <= _X86_LEVELS.index(host_base)
    return False


@cache
def tool_version(*command: str) -> str | None:
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
    cpu_model = _cpuinfo().get("model name") or platform.processor() or platform.machine()
    common: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        # The device a kernel ran on, its driver and toolkit (`Record.device`); a kind whose
        # kernels run elsewhere than on the CPU replaces them.
        "device": cpu_model,
        "driver": None,
        "toolkit": None,
        "cpu_model": cpu_model,
        "cpu_cores": cpu_cores(),
        "cpu_isa": cpu_isa(),
        "cpu_features": list(kind_of("cpu").split(cpu_isa())[1]),
        "threads": threads,
    }
    return {**common, **worker_backend(target).fingerprint(target)}
