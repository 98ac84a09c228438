"""The launch ABI of a CUDA program (`compiler.kernel`) turned into launches: which kernels run
with which grid, and the `kernelParams` values they all take.

Pure ctypes and no driver, so that the measuring child (on a GPU or the emulator) and
`client.load_kernel` launch an artifact the same way.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Mapping, Sequence
from typing import Any

from tunehub.runtime.abi import eval_extent
from tunehub.targets.cuda.tensor_map import Encoded

Plan = list[tuple[str, list[int], list[int], int]]
KNOWN = ("kernels", "workspace", "tensor_maps")  # what a launch may hold (`runtime.abi`)


def check_launch(launch: Mapping[str, Any]) -> None:
    """ValueError where the launch holds what this version cannot pass its kernels: a kernel
    from a newer tunehub would otherwise be launched without some of its parameters."""
    unknown = sorted(set(launch) - set(KNOWN))
    if unknown:
        raise ValueError(
            f"this kernel's launch holds {', '.join(unknown)}, which this version of tunehub "
            "cannot pass to its kernels: load it with the version that tuned it, or newer"
        )


def launch_plan(kernels: Sequence[Mapping[str, Any]], symbols: Mapping[str, int]) -> Plan:
    """(entry, grid, block, dynamic shared bytes) of each kernel to launch, in order; a kernel
    whose grid has a zero extent is left out, as launching it would be an error."""
    plan = []
    for kernel in kernels:
        grid = [eval_extent(g, symbols) for g in kernel["grid"]]
        if math.prod(grid) > 0:
            plan.append((kernel["entry"], grid, list(kernel["block"]), kernel["shared_bytes"]))
    return plan


def workspace_bytes(launch: Mapping[str, Any], symbols: Mapping[str, int]) -> list[int]:
    """The size of each workspace the caller allocates, in `launch["workspace"]` order."""
    return [eval_extent(w["bytes"], symbols) for w in launch.get("workspace", [])]


def kernel_params(
    buffers: Sequence[int],
    workspaces: Sequence[int],
    symbols: Mapping[str, int],
    order: Sequence[str],
    maps: Sequence[Encoded] = (),
) -> list[Any]:
    """Every kernel's arguments: the argument buffers (inputs, then outputs), the workspaces,
    the symbols in `order` as int64, then the encoded tensor maps (`targets.cuda.tensor_map`)."""
    params: list[Any] = [ctypes.c_void_p(a) for a in buffers]
    params += [ctypes.c_void_p(w) for w in workspaces]
    params += [ctypes.c_int64(int(symbols[s])) for s in order]
    return [*params, *maps]
