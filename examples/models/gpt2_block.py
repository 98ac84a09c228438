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

`to_onnx` writes the block node by node with the `onnx` helper API, each op as the ONNX op
that computes the same thing, and each int4 linear as onnxruntime's `com.microsoft`
MatMulNBits (the same nibbles: MLC's words read as little-endian bytes are MatMulNBits'
blocks; zero points 7; the scales in float32, as MatMulNBits wants them in A's type).
`gpt2_block.tvmscript` is the TIR form. The causal mask is an input (`[seq, seq]`, 0 or
-inf), as a serving runtime passes it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    import onnx

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


def to_onnx(block: Block) -> onnx.ModelProto:
    """The block as an ONNX model (opset 20, `com.microsoft` 1) over `x [seq, d]` and
    `mask [seq, seq]`, `seq` a symbolic dimension."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes: list[onnx.NodeProto] = []
    weights: list[onnx.TensorProto] = []

    def weight(name: str, value: Any) -> str:
        array = value.detach().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        weights.append(numpy_helper.from_array(array, name))
        return name

    def node(op: str, inputs: list[str], name: str, **attrs: Any) -> str:
        domain = "com.microsoft" if op == "MatMulNBits" else ""
        nodes.append(helper.make_node(op, inputs, [name], name=name, domain=domain, **attrs))
        return name

    def norm(x: str, module: nn.LayerNorm, name: str) -> str:
        w, b = weight(f"{name}.weight", module.weight), weight(f"{name}.bias", module.bias)
        return node("LayerNormalization", [x, w, b], name, axis=-1, epsilon=module.eps)

    def linear(x: str, module: Int4Linear, name: str) -> str:
        n, k = module.n, module.k
        words = module.qweight.numpy().view(np.uint8).reshape(n, k // GROUP, GROUP // 2)
        zeros = np.full(n * ((k // GROUP + 1) // 2), ZERO * 17, np.uint8)  # two 7s a byte
        inputs = [
            x,
            weight(f"{name}.qweight", words),
            weight(f"{name}.scales", module.scales.float().reshape(-1)),
            weight(f"{name}.zeros", zeros),
        ]
        product = node("MatMulNBits", inputs, f"{name}.matmul", K=k, N=n, bits=4, block_size=GROUP)
        return node("Add", [product, weight(f"{name}.bias", module.bias)], f"{name}.add")

    def heads(x: str, name: str) -> str:
        shape = weight(f"{name}.shape", np.array([0, block.heads, block.d // block.heads]))
        split = node("Reshape", [x, shape], f"{name}.reshape")
        return node("Transpose", [split], f"{name}.transpose", perm=[1, 0, 2])

    h = norm("x", block.ln_1, "ln_1")
    q, k, v = (heads(linear(h, getattr(block, n), n), f"{n}.heads") for n in "qkv")
    k = node("Transpose", [k], "k.transpose_2", perm=[0, 2, 1])
    scale = weight("scale", np.array(1.0 / math.sqrt(block.d // block.heads), np.float32))
    scores = node("Mul", [node("MatMul", [q, k], "scores.matmul"), scale], "scores.mul")
    scores = node("Add", [scores, "mask"], "scores.add")
    attention = node("MatMul", [node("Softmax", [scores], "softmax", axis=-1), v], "attention")
    merged = node("Transpose", [attention], "attention.transpose", perm=[1, 0, 2])
    merged = node("Reshape", [merged, weight("merged.shape", np.array([0, block.d]))], "merged")
    x = node("Add", ["x", linear(merged, block.proj, "proj")], "residual_1")
    up = linear(norm(x, block.ln_2, "ln_2"), block.fc1, "fc1")
    up = node("Gelu", [up], "gelu", approximate="tanh")
    out = node("Add", [x, linear(up, block.fc2, "fc2")], "out")
    graph = helper.make_graph(
        nodes,
        "gpt2_block",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", block.d]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["seq", "seq"]),
        ],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["seq", block.d])],
        weights,
    )
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    onnx.checker.check_model(model)
    return model


def save_onnx(path: str | Path, block: Block | None = None) -> Path:
    """Write the example block (or `block`) as an ONNX file."""
    import onnx

    path = Path(path)
    onnx.save(to_onnx(block or make()[0]), str(path))
    return path
