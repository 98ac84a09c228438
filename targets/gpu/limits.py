"""GPU device limits: what one block may use, which GPU configs are checked against before
they are compiled, and how many blocks an SM holds at once.

Each GPU kind knows its devices: its compiler facet gives the limits of a target
(`GpuCompiler.limits`; CUDA's table per arch is `targets.cuda.limits`), and `limits_for`
asks it. Threads per block and shared memory are hard limits (a launch past them fails).
Registers are an estimate: a launch bound makes the compiler fit a block's registers into the
register file by spilling, which compiles but runs slowly, so configs whose estimate does not
fit are rejected as well.

Per SM (for the cost model's occupancy and wave estimates, `residency`): resident warps,
blocks, shared memory and registers, and the SM count of one reference GPU of the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tunehub.compiler.backend import compiler_backend
from tunehub.schemas.target import Target

KIB = 1024
WARP = 32  # threads that run in lockstep (and exchange values by shuffles)
REGISTER_GRANULE = 8  # registers per thread are allocated in multiples of this (256 per warp)


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


@runtime_checkable
class Devices(Protocol):
    """A GPU kind's compiler facet, as far as limits go (`GpuCompiler`)."""

    def limits(self, target: Target) -> DeviceLimits: ...


def limits_for(target: Target) -> DeviceLimits:
    """The limits of `target`'s device, as its kind's compiler facet gives them."""
    backend = compiler_backend(target)
    if not isinstance(backend, Devices):
        raise TypeError(f"{target} is not a GPU target: its compiler knows no device limits")
    return backend.limits(target)


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
