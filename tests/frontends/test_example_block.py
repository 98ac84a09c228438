"""The example GPT-2 block (`examples/models/`) read by all three frontends: from PyTorch,
from its ONNX export and from its TIR form, the same layers are the same workloads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunehub.compiler.canonical import workload_key
from tunehub.compiler.program import load
from tunehub.frontends import tir
from tunehub.schemas.signature import SymbolDecl
from tunehub.schemas.taskset import TaskSet

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from examples.models import gpt2_block  # noqa: E402
from examples.models.tir_form import tvmscript  # noqa: E402
from tunehub.frontends import onnx_model, torch_export  # noqa: E402

TIR_FORM = Path(gpt2_block.__file__).with_name("gpt2_block.tvmscript")
SEQ = {"seq": SymbolDecl(min=1, max=1024)}  # the torch Dim's range; the files name none
INT4_LINEARS = ("q", "k", "v", "proj", "fc1", "fc2")


def keys(taskset: TaskSet) -> dict[str, tuple[str, float]]:
    """Each task's workload key -> (the module of its first op, its weight)."""
    return {
        workload_key(load(t.signature)): (t.source_ops[0].split("/")[0].split(".")[0], t.weight)
        for t in taskset.tasks
    }


@pytest.fixture(scope="module")
def from_torch() -> TaskSet:
    module, inputs = gpt2_block.make()
    return torch_export.export(module, inputs, gpt2_block.dynamic_shapes())


def test_torch_finds_every_layer_and_leaves_nothing_out(from_torch: TaskSet) -> None:
    assert from_torch.left_out == [] and from_torch.flops.share == 1.0
    assert from_torch.symbols == SEQ
    found = sorted(module for module, _ in keys(from_torch).values())
    # q, k and v are one workload (weight 3: k's transpose is a view its reader reads
    # through), as are the two layer norms (weight 2); the attention (from `matmul_3`, the
    # scores, to `matmul_4`) is one task.
    assert found == sorted(["ln_1", "q", "matmul_3", "proj", "fc1", "fc2"])
    weights = {module: weight for module, weight in keys(from_torch).values()}
    assert weights["q"] == 3 and weights["ln_1"] == 2
    views = {entry.op for entry in from_torch.no_kernel if entry.reason.startswith("a view")}
    assert views == {"aten.unsqueeze.default", "aten.reshape.default", "aten.t.default",
                     "aten.transpose.int"}  # fmt: skip


def test_the_tir_form_is_the_same_workloads(from_torch: TaskSet) -> None:
    text = TIR_FORM.read_text()
    assert text == tvmscript(from_torch), "regenerate it: python examples/models/tir_form.py"
    from_tir = tir.read(text, TIR_FORM.name, SEQ)
    assert from_tir.left_out == [] and from_tir.flops.share == 1.0
    assert set(keys(from_tir)) == set(keys(from_torch))


def test_the_onnx_export_is_the_same_workloads_but_for_matmulnbits(
    from_torch: TaskSet, tmp_path: Path
) -> None:
    """The attention and the norms are the same workloads; an int4 linear in ONNX is a
    MatMulNBits, whose packed layout (bytes, not words) and float32 scales make it another
    workload of the same arithmetic."""
    path = gpt2_block.save_onnx(tmp_path / "block.onnx")
    from_onnx = onnx_model.read(path, SEQ)
    assert from_onnx.left_out == [] and from_onnx.flops.share == 1.0
    torch_keys, onnx_keys = keys(from_torch), keys(from_onnx)
    shared = {torch_keys[k][0] for k in set(torch_keys) & set(onnx_keys)}
    assert shared == {"ln_1", "matmul_3"}
    nbits = [t for t in from_onnx.tasks if t.signature.name.startswith("matmul_nbits")]
    assert sorted(t.source_ops[0].split(".")[0] for t in nbits) == ["fc1", "fc2", "proj", "q"]
    assert sum(t.weight for t in nbits) == len(INT4_LINEARS)
