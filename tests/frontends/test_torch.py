"""The PyTorch frontend on modules written here and exported with `torch.export`: dynamic
dimensions as symbols, ATen ops grouped as a fusing compiler would, an int4 linear written as
unpack/dequantize/matmul as one kernel, each task computing what eager PyTorch computes,
identical layers collapsing, unsupported ops listed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tunehub.compiler.program import load
from tunehub.compiler.reference import evaluate
from tunehub.frontends.names import identifier
from tunehub.schemas.signature import SymbolDecl
from tunehub.schemas.taskset import TaskSet

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from tunehub.frontends import torch_export  # noqa: E402


def run_tasks(
    taskset: TaskSet, module: Any, inputs: dict[str, Any], symbols: dict[str, int]
) -> dict[str, np.ndarray]:
    """Every task in order, each fed the module's weights, its inputs and what the tasks
    before it computed: the values of the whole model, by signature name."""
    values = {identifier(k): v.detach().numpy() for k, v in module.state_dict().items()}
    values |= {k: v.detach().numpy() for k, v in inputs.items()}
    for task in taskset.tasks:
        program = load(task.signature)
        feed = {t.name: values[t.name] for t in program.inputs}
        values |= evaluate(program, feed, symbols)
    return values


class Block(nn.Module):
    """linear + GELU, layer norm, softmax, rms norm: four kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.rms = nn.RMSNorm(32, eps=1e-6)

    def forward(self, x: Any) -> Any:
        h = self.norm(nn.functional.gelu(self.up(x)))
        return self.rms(torch.softmax(h, dim=-1) * 3.0)


def test_a_block_with_a_dynamic_dimension(tmp_path: Any) -> None:
    seq = torch.export.Dim("seq", min=1, max=512)
    module = Block().eval()
    x = torch.randn(2, 5, 16)
    taskset = torch_export.export(module, (x,), ({1: seq},))
    assert [t.signature.name for t in taskset.tasks] == [
        "linear_gelu",
        "layer_norm",
        "softmax_mul",
        "rms_norm",
    ]
    assert taskset.symbols == {"seq": SymbolDecl(min=1, max=512)}
    assert taskset.tasks[0].source_ops == ["up/linear", "gelu"]
    assert taskset.left_out == [] and taskset.flops.share == 1.0
    x = torch.randn(2, 7, 16)
    values = run_tasks(taskset, module, {"x": x}, {"seq": 7})
    (last,) = taskset.tasks[-1].signature.outputs
    expected = module(x).detach().numpy()
    np.testing.assert_allclose(values[last], expected, rtol=1e-4, atol=1e-5)


def test_dynamic_shapes_by_argument_name_and_without_a_maximum() -> None:
    """A Dim without `max` ends at the default range's end; dynamic_shapes may name the
    forward's arguments."""
    module = nn.Sequential(nn.Linear(8, 4), nn.Tanh())
    taskset = torch_export.export(module, torch.randn(3, 8), {"input": {0: torch.export.Dim("n")}})
    assert taskset.symbols == {"n": SymbolDecl(min=1, max=4096)}
    assert [t.signature.name for t in taskset.tasks] == ["linear_tanh"]


class Int4Linear(nn.Module):
    """A linear layer over int4 weights, eight to an int32, written as PyTorch code: unpack,
    dequantize with a scale per group of 16, then `linear`."""

    def __init__(self, k: int = 64, n: int = 24, group: int = 16) -> None:
        super().__init__()
        self.k, self.n, self.group = k, n, group
        packed = torch.randint(-(2**31), 2**31 - 1, (n, k // 8), dtype=torch.int32)
        self.register_buffer("qweight", packed)
        self.register_buffer("shifts", torch.arange(0, 32, 4, dtype=torch.int32))
        self.register_buffer("scales", torch.rand(n, k // group))
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x: Any) -> Any:
        levels = (self.qweight.unsqueeze(-1) >> self.shifts) & 15
        levels = levels.reshape(self.n, self.k // self.group, self.group)
        weight = (levels.to(torch.float32) - 8) * self.scales.unsqueeze(-1)
        return nn.functional.linear(x, weight.reshape(self.n, self.k), self.bias)


def test_an_int4_linear_is_one_kernel_with_its_dequantizing_prologue() -> None:
    module = Int4Linear()
    tokens = torch.export.Dim("tokens", max=4096)
    taskset = torch_export.export(module, (torch.randn(3, 64),), ({0: tokens},))
    (task,) = taskset.tasks
    # The unsqueezes and reshapes are views: the shift and the scales read through them.
    assert [c.name for c in task.signature.computes] == [
        *("rshift", "and_1", "to", "sub", "mul", "linear_acc", "linear"),
    ]
    assert [t.name for t in task.signature.inputs] == ["qweight", "shifts", "scales", "x", "bias"]
    assert task.signature.symbols == {"tokens": SymbolDecl(min=1, max=4096)}
    x = torch.randn(5, 64)
    values = run_tasks(taskset, module, {"x": x}, {"tokens": 5})
    expected = module(x).detach().numpy()
    np.testing.assert_allclose(values["linear"], expected, rtol=1e-4, atol=1e-4)


class Layers(nn.Module):
    """Two identical conv + ReLU layers, then an op with no mapping (a cumulative sum)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            *(nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU()) for _ in range(2))
        )

    def forward(self, x: Any) -> Any:
        return torch.cumsum(self.layers(x), dim=1)


def test_identical_layers_collapse_and_unmapped_ops_are_listed() -> None:
    module = Layers().eval()
    x = torch.randn(1, 4, 8, 8)
    taskset = torch_export.export(module, x)
    (task,) = taskset.tasks
    assert task.signature.name == "conv2d_relu" and task.weight == 2
    assert task.source_ops == [
        "layers.0.0/conv2d",
        "layers.0.1/relu",
        "layers.1.0/conv2d_1",
        "layers.1.1/relu_1",
    ]
    (left,) = taskset.left_out
    assert (left.op, left.count, left.reason) == (
        "aten.cumsum.default",
        1,
        "no mapping for aten.cumsum",
    )
    assert left.names == ["cumsum"] and left.flops == 4 * 8 * 8
    # The first layer's task, on its weights, is the first layer.
    program = load(task.signature)
    weights = module.layers[0][0]
    feed = {"x": x.numpy(), "layers_0_0_weight": weights.weight.detach().numpy()}
    feed["layers_0_0_bias"] = weights.bias.detach().numpy()
    (got,) = evaluate(program, feed, {}).values()
    np.testing.assert_allclose(got, module.layers[0](x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_a_module_that_does_not_export_is_refused() -> None:
    from tunehub.frontends.errors import ModelError

    class Branchy(nn.Module):
        def forward(self, x: Any) -> Any:
            return x * 2 if x.sum() > 0 else x  # data-dependent control flow

    with pytest.raises(ModelError, match=r"torch\.export failed"):
        torch_export.export(Branchy(), torch.randn(4))
    with pytest.raises(ModelError, match=r"is not a torch\.nn\.Module"):
        torch_export.export(lambda x: x, torch.randn(4))  # type: ignore[arg-type]


class CausalAttention(nn.Module):
    """A fused q/k/v projection split in three, heads made by views, a causal mask built from
    `arange`: views and the mask are no kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(32, 96)

    def forward(self, x: Any) -> Any:
        t = x.shape[1]
        q, k, v = (part.view(1, t, 4, 8).transpose(1, 2) for part in self.qkv(x).split(32, -1))
        i = torch.arange(t)
        mask = torch.where(i[None, :] <= i[:, None], 0.0, float("-inf"))
        scores = q @ k.transpose(-1, -2) * 8**-0.5 + mask
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(1, t, 32)


def attention_dims() -> Any:
    return ({1: torch.export.Dim("seq", min=2, max=64)},)


def test_views_are_read_through_and_a_causal_mask_is_folded() -> None:
    taskset = torch_export.export(
        CausalAttention().eval(), (torch.randn(1, 6, 32),), attention_dims()
    )
    # The scores, their softmax and the weighted values are one task: attention.
    assert [t.signature.name for t in taskset.tasks] == ["linear", "attention"]
    assert taskset.left_out == [] and taskset.flops.share == 1.0
    why = {entry.op: entry.reason for entry in taskset.no_kernel}
    views = [op for op, reason in why.items() if reason.startswith("a view")]
    assert {"aten.transpose.int", "aten.view.default", "<built-in function getitem>"} <= set(views)
    folded = [op for op, reason in why.items() if reason.startswith("computed once")]
    assert {"aten.arange.default", "aten.le.Tensor", "aten.where.Scalar"} <= set(folded)
    # The scores read q, k and v in the projection's output (one input, read through the
    # split and the views), and the mask, a constant input.
    attention = taskset.tasks[1].signature
    assert [t.shape for t in attention.inputs] == [[1, "seq", 96], ["seq", "seq"]]
    assert [c.name for c in attention.computes if c.reduce] == [
        "matmul", "softmax_max", "softmax_sum", "matmul_1"]  # fmt: skip


class Sdpa(nn.Module):
    """`scaled_dot_product_attention` with a mask (boolean or additive) or causal, and
    grouped key/value heads (4 query heads, 2 key/value heads)."""

    def __init__(self, causal: bool, gqa: bool) -> None:
        super().__init__()
        self.causal, self.gqa = causal, gqa

    def forward(self, q: Any, k: Any, v: Any, mask: Any) -> Any:
        return nn.functional.scaled_dot_product_attention(
            q, k, v, None if self.causal else mask, is_causal=self.causal, enable_gqa=self.gqa
        )


@pytest.mark.parametrize(
    ("causal", "gqa", "mask_dtype"),
    [(True, False, None), (False, True, torch.bool), (False, False, torch.float32)],
)
def test_scaled_dot_product_attention_is_the_eager_form(
    causal: bool, gqa: bool, mask_dtype: Any
) -> None:
    gen = torch.Generator().manual_seed(0)
    kv_heads = 2 if gqa else 4
    q = torch.randn(1, 4, 6, 8, generator=gen)
    k, v = (torch.randn(1, kv_heads, 6, 8, generator=gen) for _ in range(2))
    mask = torch.randn(6, 6, generator=gen)
    mask = mask > 0 if mask_dtype == torch.bool else mask
    if mask_dtype == torch.bool:
        mask[:, 0] = True  # no row fully masked (torch gives NaN there)
    module = Sdpa(causal, gqa).eval()
    taskset = torch_export.export(module, (q, k, v, mask))
    assert [t.signature.name for t in taskset.tasks] == ["attention"]
    assert taskset.left_out == []
    values = run_tasks(taskset, module, {"q": q, "k": k, "v": v, "mask": mask}, {})
    (out,) = taskset.tasks[0].signature.outputs
    expected = module(q, k, v, mask).numpy()
    np.testing.assert_allclose(values[out], expected, rtol=1e-5, atol=1e-5)


class RotaryLookup(nn.Module):
    """An embedding lookup, a projection with RoPE's rotate-half (slices, neg, cat) and an
    index of rows: every op mapped, RoPE in the projection's epilogue."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.q = nn.Linear(16, 16)
        self.register_buffer("cos", torch.randn(6, 16))
        self.register_buffer("sin", torch.randn(6, 16))
        self.register_buffer("rows", torch.tensor([5, 0, 2]))

    def forward(self, ids: Any) -> Any:
        q = self.q(self.emb(ids))
        rotated = torch.cat((-q[..., 8:], q[..., :8]), dim=-1)
        return (q * self.cos + rotated * self.sin)[:, self.rows]


def test_embedding_rotate_half_and_index_are_computes() -> None:
    module = RotaryLookup().eval()
    ids = torch.tensor([[3, 49, 0, 7, 7, 12]])
    taskset = torch_export.export(module, (ids,))
    assert taskset.left_out == []
    assert [t.signature.name for t in taskset.tasks] == [
        "gather",
        "linear_neg_concat_mul_add_gather",
    ]
    values = run_tasks(taskset, module, {"ids": ids}, {})
    (output,) = taskset.tasks[-1].signature.outputs
    np.testing.assert_allclose(values[output], module(ids).detach().numpy(), rtol=1e-5, atol=1e-6)
