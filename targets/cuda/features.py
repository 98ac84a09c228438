"""The device columns of a CUDA candidate's feature vector (`compiler.features`), estimated
from its loop IR: of the *main kernel*, the launch that runs the hot statement
(`targets.cuda.launches`), the kernels launched, threads per block, blocks in the grid, waves
(blocks over the SMs times the blocks one SM holds), shared memory per block (static and
dynamic), `cp.async` pipeline stages, tensor-core (WMMA, wgmma) use, a register estimate per
thread (every per-thread local value and WMMA fragment, plus a fixed overhead) and the
occupancy it allows (`targets.gpu.limits.residency`); and the ptxas columns over every
kernel (registers estimated, 0 spills and stack), which a build replaces with what ptxas
reported (`features.with_build_stats`). The SM count behind waves is a reference GPU's per
arch, not the worker's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tunehub.compiler import dtypes
from tunehub.compiler.dtypes import INDEX
from tunehub.compiler.features import index_value, log_scale, work_sites
from tunehub.compiler.loop import Decl, Function, Stmt, lanes, scalar, stmts
from tunehub.schemas.target import Target
from tunehub.targets.cuda.launches import Launch, launches
from tunehub.targets.cuda.loop import AsyncCopy, Wgmma, Wmma
from tunehub.targets.gpu.limits import WARP, limits_for, residency

# Registers a GPU thread needs besides its local values: indices, addresses and loop state
# (the schedules' estimates, fitted to ptxas on sm_80, use the same).
REGISTER_OVERHEAD = 24
# Per thread of a 16x16 WMMA fragment: an accumulator holds 8 floats; an operand, 16 packed
# halves, but ptxas loads operands just before their mma and reuses their registers (4 fits
# ptxas on sm_80 float16 matmuls within 15%).
FRAGMENT_REGISTERS = {"acc": 8, "a": 4, "b": 4}


def device_features(fn: Function, target: Target, symbols: Mapping[str, int]) -> dict[str, float]:
    """The GPU and (estimated) ptxas columns of a CUDA function."""
    found = launches(fn)

    def work(launch: Launch) -> int:
        return max(
            (
                math.prod(max(1, index_value(lp.extent, symbols)) for lp in s.loops)
                for s in work_sites(launch.body)
            ),
            default=0,
        )

    main = max(found, key=work)
    body = list(stmts(main.body))
    registers = thread_registers(main.body)
    blocks = math.prod(max(1, index_value(e, symbols)) for e in main.grid)
    resident = residency(target, main.threads, main.shared_bytes, registers)
    limits = limits_for(target)
    waits = [s.pending for s in body if isinstance(s, AsyncCopy) and s.op == "wait"]
    copies = any(isinstance(s, AsyncCopy) and s.op == "copy" for s in body)
    return {
        "gpu_kernels": float(len(found)),
        "gpu_threads": float(main.threads),
        "gpu_log_blocks": log_scale(blocks),
        "gpu_waves": blocks / (limits.sms * max(resident, 1)),
        "gpu_shared_bytes": float(main.shared_bytes),
        "gpu_async_stages": float(max(waits, default=0) + 2) if copies else 0.0,
        "gpu_tensor_cores": float(any(isinstance(s, Wmma | Wgmma) for s in body)),
        "gpu_registers": float(registers),
        "gpu_occupancy": resident * -(-main.threads // WARP) / limits.warps_per_sm,
        "ptxas_registers": float(max(thread_registers(k.body) for k in found)),
        "ptxas_spill_bytes": 0.0,
        "ptxas_stack_bytes": 0.0,
        "ptxas_shared_bytes": float(max(0 if k.dynamic else k.shared_bytes for k in found)),
    }


def thread_registers(kernel: Stmt) -> int:
    """Registers per thread, estimated: 32-bit words of every per-thread local value (the
    register tile, operand fragments, values held across a barrier), FRAGMENT_REGISTERS per
    WMMA fragment, and REGISTER_OVERHEAD (index locals included). It ignores that ptxas
    reuses the registers of values whose lives do not overlap."""
    words = 0
    for s in stmts(kernel):
        if isinstance(s, Decl) and not s.shared and s.dtype != INDEX:
            size = dtypes.itemsize(dtypes.compute_dtype(scalar(s.dtype))) * lanes(s.dtype)
            words += math.prod(s.shape) * -(-size // 4)
        elif isinstance(s, Wmma) and s.op == "fragment":
            words += FRAGMENT_REGISTERS[s.use]
    return words + REGISTER_OVERHEAD
