"""A Triton int4 weight-only linear for the signature's own layout: the peer that
`bench/gpu_kernels.py` sets tunehub's int4 GEMV and GEMM against, beside torch's
dequantize-then-matmul (what a user writes in Triton when no library kernel fits).

out[m, n] = float16(residual[m, n] + bias[n] + sum_k X[m, k] * (q(n, k) - 7) * S[n, k // 32])
with q(n, k) the nibble `k % 8` of the uint32 word W[n, k // 8] (`examples/int4_matmul.json`).
Two kernels, each autotuned over a few configs: for one row a GEMV that multiplies and sums in
float32 (a dot of one row would waste a tensor-core tile), for more rows a tiled `tl.dot`
on float16 weights dequantized in registers (as torch's baseline rounds them), accumulating in
float32. Checked on the CPU with `TRITON_INTERPRET=1` (see `main`); imported by the benchmark
only where triton is.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

GROUP = 32  # k values per scale
ZERO = 7  # the nibbles' zero point
# The same two numbers as the kernels see them: compiled Triton reads only constexpr globals
# (the interpreter reads any).
_GROUP, _ZERO = tl.constexpr(GROUP), tl.constexpr(ZERO)

GEMV_CONFIGS = [
    triton.Config({"BN": bn, "BK": bk}, num_warps=w)
    for bn, bk, w in ((8, 512, 4), (16, 256, 4), (32, 256, 8), (4, 1024, 4))
]
GEMM_CONFIGS = [
    triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP_M": 8}, num_stages=s, num_warps=w)
    for bm, bn, bk, s, w in (
        (128, 128, 64, 3, 8),
        (128, 256, 64, 3, 8),
        (64, 128, 64, 4, 4),
        (128, 64, 64, 4, 4),
    )
]


@triton.jit
def _weights(w_ptr, s_ptr, cols, ks, n, k, stride_w, stride_s):
    """The dequantized float32 weights of `cols` x `ks` (zero where out of range)."""
    inside = (cols[:, None] < n) & (ks[None, :] < k)
    words = tl.load(w_ptr + cols[:, None] * stride_w + ks[None, :] // 8, mask=inside, other=0)
    nibbles = (words >> ((ks[None, :] % 8) * 4)) & 15
    scales = tl.load(s_ptr + cols[:, None] * stride_s + ks[None, :] // _GROUP, mask=inside, other=0)
    return (nibbles.to(tl.float32) - _ZERO) * scales.to(tl.float32)


@triton.jit
def _gemv_kernel(
    x_ptr,
    w_ptr,
    s_ptr,
    bias_ptr,
    res_ptr,
    out_ptr,
    N,
    K,
    stride_w,
    stride_s,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    cols = tl.program_id(0) * BN + tl.arange(0, BN)
    acc = tl.zeros((BN,), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BK)):
        ks = k0 * BK + tl.arange(0, BK)
        x = tl.load(x_ptr + ks, mask=ks < K, other=0.0).to(tl.float32)
        weights = _weights(w_ptr, s_ptr, cols, ks, N, K, stride_w, stride_s)
        acc += tl.sum(weights * x[None, :], axis=1)
    inside = cols < N
    bias = tl.load(bias_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    residual = tl.load(res_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    tl.store(out_ptr + cols, (residual + bias + acc).to(tl.float16), mask=inside)


@triton.jit
def _gemm_kernel(
    x_ptr,
    w_ptr,
    s_ptr,
    bias_ptr,
    res_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_x,
    stride_w,
    stride_s,
    stride_r,
    stride_o,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Programs walk the output in groups of GROUP_M tile rows, so neighbours share weights in L2.
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_m = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BK)):
        ks = k0 * BK + tl.arange(0, BK)
        x_mask = (rows[:, None] < M) & (ks[None, :] < K)
        x = tl.load(x_ptr + rows[:, None] * stride_x + ks[None, :], mask=x_mask, other=0.0)
        weights = _weights(w_ptr, s_ptr, cols, ks, N, K, stride_w, stride_s).to(tl.float16)
        acc = tl.dot(x, tl.trans(weights), acc=acc)
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    residual = tl.load(res_ptr + rows[:, None] * stride_r + cols[None, :], mask=inside, other=0.0)
    value = residual.to(tl.float32) + bias[None, :] + acc
    tl.store(out_ptr + rows[:, None] * stride_o + cols[None, :], value.to(tl.float16), mask=inside)


_GEMV = triton.autotune(configs=GEMV_CONFIGS, key=["N", "K"])(_gemv_kernel)
_GEMM = triton.autotune(configs=GEMM_CONFIGS, key=["M", "N", "K"])(_gemm_kernel)


def linear(
    x: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    bias: torch.Tensor,
    residual: torch.Tensor,
    out: torch.Tensor,
    config: triton.Config | None = None,
) -> torch.Tensor:
    """`out` = the int4 linear of `x` [M, K] (float16) with `words` [N, K / 8] (int32 holding
    the uint32 words), `scales` [N, K / 32], `bias` [N] and `residual` [M, N] (float16);
    autotuned, or under one `config` of the kernel for M (GEMV_CONFIGS for one row)."""
    m, k = x.shape
    n = words.shape[0]
    meta: dict[str, Any] = {}
    if config is not None:
        meta = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    if m == 1:
        kernel = _GEMV if config is None else _gemv_kernel
        kernel[lambda meta: (triton.cdiv(n, meta["BN"]),)](
            x, words, scales, bias, residual, out, n, k, words.stride(0), scales.stride(0), **meta
        )
        return out

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)

    (_GEMM if config is None else _gemm_kernel)[grid](
        x,
        words,
        scales,
        bias,
        residual,
        out,
        m,
        n,
        k,
        x.stride(0),
        words.stride(0),
        scales.stride(0),
        residual.stride(0),
        out.stride(0),
        **meta,
    )
    return out


def reference(
    x: torch.Tensor,
    words: torch.Tensor,
    scales: torch.Tensor,
    bias: torch.Tensor,
    residual: torch.Tensor,
) -> torch.Tensor:
    """The signature's value in float32 (weights dequantized exactly), rounded to float16."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=words.device)
    nibbles = ((words.unsqueeze(-1) >> shifts) & 15).reshape(words.shape[0], -1)
    weights = (nibbles.float() - ZERO) * scales.float().repeat_interleave(GROUP, dim=1)
    return (residual.float() + bias.float() + x.float() @ weights.t()).half()


def main() -> None:
    """Check every config of both kernels against `reference` on small shapes (on the CPU,
    with TRITON_INTERPRET=1): `python bench/triton_int4.py`."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator().manual_seed(0)
    for m, n, k in ((1, 40, 320), (1, 64, 1024), (37, 72, 256), (130, 256, 512)):
        words = torch.randint(-(2**31), 2**31, (n, k // 8), generator=generator, dtype=torch.int64)
        words = words.to(torch.int32).to(device)
        scales = (torch.rand(n, k // GROUP, generator=generator) / 16).half().to(device)
        x = (torch.rand(m, k, generator=generator) * 2 - 1).half().to(device)
        bias = (torch.rand(n, generator=generator) * 2 - 1).half().to(device)
        residual = (torch.rand(m, n, generator=generator) * 2 - 1).half().to(device)
        want = reference(x, words, scales, bias, residual).float()
        for config in GEMV_CONFIGS if m == 1 else GEMM_CONFIGS:
            out = torch.empty(m, n, dtype=torch.float16, device=device)
            got = linear(x, words, scales, bias, residual, out, config).float()
            error = (got - want).abs().max().item()
            scale = want.abs().max().item()
            print(f"M={m} N={n} K={k} {config}: max abs error {error:.3g} (output {scale:.3g})")
            assert error <= 2e-3 * scale + 1e-3, (m, n, k, config, error)
    print("ok")


if __name__ == "__main__":
    main()
