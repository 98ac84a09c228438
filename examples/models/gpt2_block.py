"""A GPT-2-style decoder block with int4 weight-only linears, built in code (nothing
downloaded): the example model of `examples/models/README.md` and `bench/model_e2e.py`.

    x [seq, d] -> layer norm -> q, k, v (int4 linears) -> causal attention over `heads`
               -> output projection (int4) + residual -> layer norm -> fc1 (int4) -> GELU
               -> fc2 (int4) + residual

The linears' weights are quantized as MLC-LLM's q4 layout has them: eight 4-bit levels to a
32-bit word, the level of column `j` in bits `4 * (j % 8)` of word `j // 8`, a float16 scale
per group of 32 columns, zero point 7, so `w[n, j] = (level - 7) * scale[n, j // 32]`. The
words are int32 tensors holding those bits (torch has no shifts of uint32 on the CPU); the
dequantizing prologue masks after shifting, so the sign bit never shows.

Every op is one that the ONNX and TIR forms write the same way (`onnx_model` builds the ONNX
graph node by node, `gpt2_block.tvmscript` is the TIR form), so the three frontends find the
same tasks. The causal mask is an input (`[seq, seq]`, 0 or -inf), as a serving runtime
passes it.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

GROUP, ZERO = 32, 7
SHIFTS = tuple(range(0, 32, 4))


def quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`weight [n, k]` as (words `[n, k / 8]` int32, scales `[n, k / 32]` float16), MLC's q4
    layout: levels 0..15 around zero point 7, each group's scale its largest magnitude / 7."""
    n, k = weight.shape
    groups = weight.reshape(n, k // GROUP, GROUP)
    scales = (groups.abs().amax(-1) / ZERO).clamp(min=1e-6).to(torch.float16)
    levels = torch.round(groups / scales.float().unsqueeze(-1)) + ZERO
    levels = levels.clamp(0, 15).to(torch.int64).reshape(n, k // 8, 8)
    words = (levels << torch.tensor(SHIFTS)).sum(-1)
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return words, scales


class Int4Linear(nn.Module):
    """`x @ dequantize(w).T + bias`, the weight dequantized on every call (what eager PyTorch
    does with a weight-only quantized linear that has no fused kernel)."""

    def __init__(self, k: int, n: int, generator: torch.Generator) -> None:
        super().__init__()
        self.k, self.n = k, n
        weight = torch.randn(n, k, generator=generator) / math.sqrt(k)
        words, scales = quantize(weight)
        self.register_buffer("qweight", words)
        self.register_buffer("scales", scales)
        self.register_buffer("shifts", torch.tensor(SHIFTS, dtype=torch.int32))
        self.bias = nn.Parameter(torch.randn(n, generator=generator) * 0.02)

    def dequantize(self) -> torch.Tensor:
        levels = (self.qweight.unsqueeze(-1) >> self.shifts) & 15
        levels = levels.reshape(self.n, self.k // GROUP, GROUP)
        weight = (levels.to(torch.float32) - float(ZERO)) * self.scales.to(torch.float32).unsqueeze(
            -1
        )
        return weight.reshape(self.n, self.k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.dequantize().t() + self.bias


class Block(nn.Module):
    """One pre-norm GPT-2 decoder block over `[seq, d]` activations (float32)."""

    def __init__(self, d: int = 512, heads: int = 8, mlp: int = 2048, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.d, self.heads = d, heads
        self.ln_1 = nn.LayerNorm(d)
        self.q = Int4Linear(d, d, generator)
        self.k = Int4Linear(d, d, generator)
        self.v = Int4Linear(d, d, generator)
        self.proj = Int4Linear(d, d, generator)
        self.ln_2 = nn.LayerNorm(d)
        self.fc1 = Int4Linear(d, mlp, generator)
        self.fc2 = Int4Linear(mlp, d, generator)
        with torch.no_grad():
            for norm in (self.ln_1, self.ln_2):
                norm.weight.copy_(1 + 0.1 * torch.randn(d, generator=generator))
                norm.bias.copy_(0.1 * torch.randn(d, generator=generator))

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], self.heads, self.d // self.heads).transpose(0, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln_1(x)
        q, k, v = self._heads(self.q(h)), self._heads(self.k(h)), self._heads(self.v(h))
        scores = q @ k.transpose(1, 2) * (1.0 / math.sqrt(self.d // self.heads)) + mask
        attention = torch.softmax(scores, dim=-1) @ v
        x = x + self.proj(attention.transpose(0, 1).reshape(x.shape[0], self.d))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln_2(x)), approximate="tanh"))


def causal_mask(seq: int) -> torch.Tensor:
    """The additive mask of causal attention: 0 on and below the diagonal, -inf above."""
    return torch.full((seq, seq), float("-inf")).triu(1)


def inputs(seq: int = 32, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(seq, 512, generator=generator), causal_mask(seq)


def make() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """The block (fixed-seed weights) and example inputs of 32 tokens."""
    return Block().eval(), inputs()


def dynamic_shapes() -> tuple[dict[int, Any], dict[int, Any]]:
    """`seq` dynamic (1..1024) in both inputs, as `torch.export` takes it."""
    seq = torch.export.Dim("seq", min=1, max=1024)
    return {0: seq}, {0: seq, 1: seq}


def make_dynamic() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor], Any]:
    """`make` with the dynamic dimension: `tunehub extract --torch gpt2_block:make_dynamic`."""
    return (*make(), dynamic_shapes())
