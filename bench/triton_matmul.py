"""An fp16 Triton matmul autotuned over a few standard tile configs (the Triton tutorial's
grouped-tile `tl.dot` kernel): the hand-written, hand-tunable baseline that
`bench/gpu_kernels.py` sets tunehub's GEMM against, beside cuBLAS.

Imported only where triton is (a GPU machine); fp32 accumulation, fp16 output, as the
benchmark's signature computes.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

# (BM, BN, BK, stages, warps): the tutorial's Hopper/Ampere-friendly shapes.
_TILES = [
    (128, 256, 64, 3, 8),
    (256, 128, 64, 3, 8),
    (128, 128, 64, 4, 4),
    (128, 128, 32, 4, 4),
    (64, 256, 32, 4, 4),
    (128, 64, 32, 4, 4),
]
CONFIGS = [
    triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8}, num_stages=s, num_warps=w)
    for bm, bn, bk, s, w in _TILES
]


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def _matmul_kernel(
    a,
    b,
    c,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP: tl.constexpr,
) -> None:
    # Programs walk the output in groups of GROUP tile rows, so neighbours share B tiles in L2.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GROUP * tiles_n
    first_m = (pid // per_group) * GROUP
    group_m = min(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m
    rows = (pid_m * BM + tl.arange(0, BM)) % M
    cols = (pid_n * BN + tl.arange(0, BN)) % N
    ks = tl.arange(0, BK)
    a_tile = a + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_tile = b + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        x = tl.load(a_tile, mask=ks[None, :] < K - k * BK, other=0.0)
        y = tl.load(b_tile, mask=ks[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(x, y, acc=acc)
        a_tile += BK * stride_ak
        b_tile += BK * stride_bk
    out_rows = pid_m * BM + tl.arange(0, BM)
    out_cols = pid_n * BN + tl.arange(0, BN)
    mask = (out_rows[:, None] < M) & (out_cols[None, :] < N)
    c_tile = c + out_rows[:, None] * stride_cm + out_cols[None, :] * stride_cn
    tl.store(c_tile, acc.to(tl.float16), mask=mask)


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """`out = a @ b` for fp16 matrices on the GPU (the first call per shape autotunes)."""
    m, k = a.shape
    n = b.shape[1]

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)

    _matmul_kernel[grid](
        a, b, out, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), *out.stride()
    )
    return out
