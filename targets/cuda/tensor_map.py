"""Tensor maps (sm_90 TMA): the descriptors through which a kernel's `TensorCopy`s read
global memory or store into it, one kernel parameter each, after the symbols (`runtime.abi`).

The launch names each map (`launch["tensor_maps"]`: its argument, box and swizzle); the rest
depends on the call, so a caller encodes the maps per call from the arguments' addresses and
shapes: on a GPU with the driver (`targets.cuda.gpu.encode_tensor_map`), in the emulator in
the emulator's own 16-word form (`emulated`, read by `cuda_emulate.h`'s `tensor_copy`). Both
are 128 bytes passed by value, so `launch.kernel_params` packs them alike.

Pure ctypes and no driver, as `targets.cuda.launch`.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tunehub.compiler.dtypes import itemsize
from tunehub.runtime.arguments import Arguments, shape

Encoded = ctypes.Array[ctypes.c_uint64]  # the 128 bytes of one map
WORDS = 16


@dataclass(frozen=True)
class TensorMap:
    """One map at a call: `arg`'s buffer (row-major, contiguous) of `dtype`, its extents
    `dims` innermost first, read in boxes of `box` elements per dimension, written to shared
    memory with the `swizzle` (bytes) of `targets.cuda.loop.TensorCopy`."""

    arg: str
    dtype: str
    dims: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int

    @property
    def strides(self) -> tuple[int, ...]:
        """The byte stride of each dimension but the innermost."""
        size = itemsize(self.dtype)
        return tuple(size * math.prod(self.dims[:d]) for d in range(1, len(self.dims)))


def tensor_maps(metadata: Mapping[str, Any], symbols: Mapping[str, int]) -> list[TensorMap]:
    """The maps a call of the kernel `metadata` describes passes, in parameter order, at these
    symbol values. A zero extent is given as 1, which the encodings accept: a tensor with no
    elements is never copied from (its launches have no blocks, or no slices of k)."""
    arguments = Arguments(metadata)
    maps = []
    for spec in metadata["launch"].get("tensor_maps", []):
        arg = arguments.arg(spec["arg"])
        dims = tuple(max(1, e) for e in reversed(shape(arg, symbols)))
        maps.append(TensorMap(arg.name, arg.dtype, dims, tuple(spec["box"]), spec["swizzle"]))
    return maps


def emulated(tensor_map: TensorMap, address: int) -> Encoded:
    """The map as the emulator reads it: [0] the address, [1] rank | element bytes << 8 |
    swizzle bytes << 16, [2..6] the extents and [11..15] the box, innermost first, [7..10]
    the byte strides of dimensions 1 to 4."""
    rank = len(tensor_map.dims)
    words = [0] * WORDS
    words[0] = address
    words[1] = rank | itemsize(tensor_map.dtype) << 8 | tensor_map.swizzle << 16
    words[2 : 2 + rank] = tensor_map.dims
    words[7 : 7 + rank - 1] = tensor_map.strides
    words[11 : 11 + rank] = tensor_map.box
    return (ctypes.c_uint64 * WORDS)(*words)
