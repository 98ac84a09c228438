"""CUDA device limits per architecture, which GPU configs are checked against before nvcc.

Threads per block and shared memory are hard limits (a launch past them fails). Registers are
an estimate: `__launch_bounds__` makes nvcc fit a block's registers into the register file by
spilling, which compiles but runs slowly, so configs whose estimate does not fit are rejected
as well. An arch this table does not know (or none, "whatever the workers have") gets sm_80's
limits, the smallest of the architectures tunehub targets by default.

Features come with the compute capability (`capability`): `cp.async` (`ASYNC_COPY`) from sm_80.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from schemas.target import Target

KIB = 1024
ASYNC_COPY = 80  # cp.async: global-to-shared copies that run in the background


@dataclass(frozen=True)
class DeviceLimits:
    shared_bytes: int  # per block, static (48 KiB) plus opted-in dynamic shared memory
    threads_per_block: int = 1024
    registers_per_thread: int = 255
    registers_per_block: int = 64 * KIB
    grid_yz: int = 65535  # blocks along grid y and z (x allows 2^31 - 1)


LIMITS = {
    "sm_70": DeviceLimits(96 * KIB),
    "sm_75": DeviceLimits(64 * KIB),
    "sm_80": DeviceLimits(163 * KIB),
    "sm_86": DeviceLimits(99 * KIB),
    "sm_87": DeviceLimits(163 * KIB),
    "sm_89": DeviceLimits(99 * KIB),
    "sm_90": DeviceLimits(227 * KIB),
    "sm_90a": DeviceLimits(227 * KIB),
}


def limits_for(target: Target) -> DeviceLimits:
    return LIMITS.get(target.arch or "sm_80", LIMITS["sm_80"])


def capability(target: Target) -> int:
    """The target's compute capability as a number (`sm_86`: 86), 0 where unknown (no arch:
    whatever the workers have, so no feature can be counted on)."""
    match = re.match(r"^sm_(\d+)", target.arch or "")
    return 0 if match is None else int(match.group(1))


def block_error(
    target: Target, threads: int, shared_bytes: int = 0, registers: int = 0
) -> str | None:
    """Why a block of `threads` threads using `shared_bytes` of shared memory and about
    `registers` registers per thread cannot run on `target`, or None."""
    limits = limits_for(target)
    if threads > limits.threads_per_block:
        return f"{threads} threads per block (at most {limits.threads_per_block})"
    if shared_bytes > limits.shared_bytes:
        return f"{shared_bytes} bytes of shared memory (at most {limits.shared_bytes})"
    allowed = min(limits.registers_per_thread, limits.registers_per_block // max(threads, 1))
    if registers > allowed:
        return f"about {registers} registers per thread (at most {allowed} at {threads} threads)"
    return None
