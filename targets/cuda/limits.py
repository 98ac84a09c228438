"""CUDA device limits per architecture (`targets.gpu.limits` says what they bound), and the
features that come with a compute capability (`capability`): `cp.async` (`ASYNC_COPY`) from
sm_80.

An arch this table does not know (or none, "whatever the workers have") gets sm_80's limits,
the smallest of the architectures tunehub targets by default. The SM counts are those of one
reference GPU per arch (sm_70 V100, sm_75 T4, sm_80 A100, sm_86 A10, sm_87 Jetson AGX Orin,
sm_89 L4, sm_90 H100 SXM), resident warps, blocks, shared memory and registers per SM those of
the CUDA occupancy tables. A worker's real GPU may have another count (an H100 PCIe has 114
SMs): the features only rank configs of one workload on one arch, so a fixed count per arch
suffices.
"""

from __future__ import annotations

import re

from tunehub.schemas.target import Target
from tunehub.targets.gpu.limits import KIB, DeviceLimits

ASYNC_COPY = 80  # cp.async: global-to-shared copies that run in the background

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


def arch_limits(target: Target) -> DeviceLimits:
    """The limits of `target`'s arch (the CUDA facet's `GpuCompiler.limits`)."""
    return LIMITS.get(target.arch or "sm_80", LIMITS["sm_80"])


def capability(target: Target) -> int:
    """The target's compute capability as a number (`sm_86`: 86), 0 where unknown (no arch:
    whatever the workers have, so no feature can be counted on)."""
    match = re.match(r"^sm_(\d+)", target.arch or "")
    return 0 if match is None else int(match.group(1))
