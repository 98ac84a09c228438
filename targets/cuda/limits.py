"""CUDA device limits per architecture, which GPU configs are checked against before nvcc.

Threads per block and shared memory are hard limits (a launch past them fails). Registers are
an estimate: `__launch_bounds__` makes nvcc fit a block's registers into the register file by
spilling, which compiles but runs slowly, so configs whose estimate does not fit are rejected
as well. An arch this table does not know (or none, "whatever the workers have") gets sm_80's
limits, the smallest of the architectures tunehub targets by default.

Features come with the compute capability (`capability`): `cp.async` (`ASYNC_COPY`) from sm_80.

Per SM (for the cost model's occupancy and wave estimates, `residency`): resident warps, blocks,
shared memory and registers per the CUDA occupancy tables, and the SM count of one reference
GPU per arch (sm_70 V100, sm_75 T4, sm_80 A100, sm_86 A10, sm_87 Jetson AGX Orin, sm_89 L4,
sm_90 H100 SXM). A worker's real GPU may have another count (an H100 PCIe has 114 SMs): the
features only rank configs of one workload on one arch, so a fixed count per arch suffices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tunehub.schemas.target import Target

KIB = 1024
ASYNC_COPY = 80  # cp.async: global-to-shared copies that run in the background


@dataclass(frozen=True)
class DeviceLimits:
    shared_bytes: int  # per block, static (48 KiB) plus opted-in dynamic shared memory
    sms: int  # of the arch's reference GPU (module doc)
    shared_per_sm: int
    warps_per_sm: int = 64
    blocks_per_sm: int = 32
    reserved_shared: int = KIB  # per resident block, taken by the runtime (sm_80 and later)
    threads_per_block: int = 1024
    registers_per_thread: int = 255
    registers_per_block: int = 64 * KIB
    registers_per_sm: int = 64 * KIB
    grid_yz: int = 65535  # blocks along grid y and z (x allows 2^31 - 1)


LIMITS = {
    "sm_70": DeviceLimits(96 * KIB, sms=80, shared_per_sm=96 * KIB, reserved_shared=0),
    "sm_75": DeviceLimits(
        64 * KIB,
        sms=40,
        shared_per_sm=64 * KIB,
        warps_per_sm=32,
        blocks_per_sm=16,
        reserved_shared=0,
    ),
    "sm_80": DeviceLimits(163 * KIB, sms=108, shared_per_sm=164 * KIB),
    "sm_86": DeviceLimits(
        99 * KIB, sms=72, shared_per_sm=100 * KIB, warps_per_sm=48, blocks_per_sm=16
    ),
    "sm_87": DeviceLimits(
        163 * KIB, sms=16, shared_per_sm=164 * KIB, warps_per_sm=48, blocks_per_sm=16
    ),
    "sm_89": DeviceLimits(
        99 * KIB, sms=58, shared_per_sm=100 * KIB, warps_per_sm=48, blocks_per_sm=24
    ),
    "sm_90": DeviceLimits(227 * KIB, sms=132, shared_per_sm=228 * KIB),
    "sm_90a": DeviceLimits(227 * KIB, sms=132, shared_per_sm=228 * KIB),
}
WARP = 32
REGISTER_GRANULE = 8  # registers per thread are allocated in multiples of this (256 per warp)


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


def residency(target: Target, threads: int, shared_bytes: int, registers: int) -> int:
    """Blocks of `threads` threads using `shared_bytes` of shared memory and `registers` per
    thread that one SM of `target` holds at once (0: not even one), the least of what warps,
    blocks, shared memory and registers allow (CUDA's occupancy calculator, without its
    per-warp allocation granules)."""
    limits = limits_for(target)
    warps = -(-max(threads, 1) // WARP)
    granted = -(-max(registers, 1) // REGISTER_GRANULE) * REGISTER_GRANULE
    by_registers = limits.registers_per_sm // (granted * WARP) // warps
    by_shared = limits.shared_per_sm // max(shared_bytes + limits.reserved_shared, 1)
    return min(limits.warps_per_sm // warps, limits.blocks_per_sm, by_shared, by_registers)
