"""Tensor maps (TMA) at a call: what the launch names, resolved at the call's symbols, the
emulator's encoding of them, and where they go among a kernel's parameters. That the
emulator reads its encoding as the copy engine reads the driver's is for the emulated and
`gpu` runs of `test_cuda_wgmma`."""

from __future__ import annotations

import ctypes

from tunehub.targets.cuda.launch import kernel_params
from tunehub.targets.cuda.tensor_map import TensorMap, emulated, tensor_maps

METADATA = {
    "args": [
        {"name": "A", "shape": ["B", "M", 96], "dtype": "bfloat16", "role": "input"},
        {"name": "W", "shape": [40, 96], "dtype": "float16", "role": "input"},
        {"name": "C", "shape": ["B", "M", 40], "dtype": "float32", "role": "output"},
    ],
    "symbols": ["B", "M"],
    "launch": {
        "kernels": [],
        "workspace": [],
        "tensor_maps": [
            {"name": "A_map_64x1x128", "arg": "A", "box": [64, 128, 1], "swizzle": 128},
            {"name": "W_map_64x64", "arg": "W", "box": [64, 64], "swizzle": 128},
        ],
    },
}


def test_maps_take_their_arguments_extents_innermost_first() -> None:
    a, w = tensor_maps(METADATA, {"B": 3, "M": 70})
    assert a == TensorMap("A", "bfloat16", (96, 70, 3), (64, 128, 1), 128)
    assert a.strides == (192, 192 * 70)
    assert w == TensorMap("W", "float16", (96, 40), (64, 64), 128) and w.strides == (192,)
    # No rows: nothing is copied, and the encodings want every extent positive.
    assert tensor_maps(METADATA, {"B": 3, "M": 0})[0].dims == (96, 1, 3)
    assert tensor_maps({**METADATA, "launch": {"kernels": []}}, {}) == []


def test_the_emulator_encoding_and_the_parameter_order() -> None:
    a = tensor_maps(METADATA, {"B": 3, "M": 70})[0]
    words = list(emulated(a, 0x1000))
    assert words[:2] == [0x1000, 3 | 2 << 8 | 128 << 16]
    assert words[2:7] == [96, 70, 3, 0, 0] and words[7:11] == [192, 13440, 0, 0]
    assert words[11:16] == [64, 128, 1, 0, 0]
    encoded = emulated(a, 0x1000)
    params = kernel_params([16, 32], [48], {"M": 70, "B": 3}, ["B", "M"], [encoded])
    assert [p.value for p in params[:5]] == [16, 32, 48, 3, 70]
    assert params[5] is encoded and ctypes.sizeof(params[5]) == 128
