"""The ONNX frontend on graphs built here with `onnx.helper`: ops grouped as a fusing compiler
would, each task computing what ONNX's reference evaluator computes for its outputs;
MatMulNBits in its packed layout; symbolic dimensions; identical blocks collapsing; ops it
cannot map listed; malformed files refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tunehub.compiler.inputs import random_inputs
from tunehub.compiler.program import load
from tunehub.compiler.reference import evaluate
from tunehub.frontends import onnx_model
from tunehub.frontends.errors import ModelError
from tunehub.schemas.signature import SymbolDecl
from tunehub.schemas.taskset import TaskSet

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

RNG = np.random.default_rng(0)
F32 = TensorProto.FLOAT


def weight(name: str, *shape: int, dtype: Any = np.float32) -> Any:
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(dtype), name)


def scalar(name: str, value: float) -> Any:
    return numpy_helper.from_array(np.array(value, np.float32), name)


def build(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any]) -> Any:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def extract(model: Any, tmp_path: Path, **ranges: SymbolDecl) -> TaskSet:
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    return onnx_model.read(path, ranges)


def check_against_onnx(
    model: Any, taskset: TaskSet, feeds: dict[str, np.ndarray], symbols: dict[str, int]
) -> None:
    """Every task, fed the values the model computes for its inputs, returns what the model
    computes for its outputs (ONNX's reference evaluator, every intermediate kept)."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    values |= feeds | ReferenceEvaluator(model).run(None, feeds, intermediate=True)
    for task in taskset.tasks:
        program = load(task.signature)
        inputs = {
            t.name: values[t.name].reshape(program.shape_of(t.name, symbols))
            for t in program.inputs
        }
        for name, got in evaluate(program, inputs, symbols).items():
            # numpy computes float16 ops in float16; signatures in float32, rounding once.
            rtol = 2e-3 if got.dtype == np.float16 else 1e-4
            np.testing.assert_allclose(got, values[name].reshape(got.shape), rtol=rtol, atol=1e-5)


def test_a_transformer_block_groups_like_a_fusing_compiler(tmp_path: Path) -> None:
    """matmul + bias + GELU (written as div/erf/add/mul/mul) is one kernel; the rms norm
    written as pow/mean/add/sqrt/div/mul is one; softmax and layer norm are theirs."""
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["h", "e1"], ["g"]),
        helper.make_node("Mul", ["g", "half"], ["gelu"]),
        helper.make_node("Pow", ["gelu", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1]),
        helper.make_node("Add", ["ms", "eps"], ["mse"]),
        helper.make_node("Sqrt", ["mse"], ["rms"]),
        helper.make_node("Div", ["gelu", "rms"], ["normed"]),
        helper.make_node("Mul", ["normed", "gamma"], ["y"]),
        helper.make_node("Softmax", ["y"], ["p"], axis=-1),
        helper.make_node("LayerNormalization", ["p", "ln_w", "ln_b"], ["out"], axis=-1),
    ]
    inits = [
        weight("W", 8, 32),
        weight("b", 32),
        scalar("sqrt2", 1.4142135),
        scalar("one", 1.0),
        scalar("half", 0.5),
        scalar("two", 2.0),
        scalar("eps", 1e-6),
        weight("gamma", 32),
        weight("ln_w", 32),
        weight("ln_b", 32),
    ]
    x = helper.make_tensor_value_info("X", F32, ["batch", "seq", 8])
    out = helper.make_tensor_value_info("out", F32, ["batch", "seq", 32])
    model = build(nodes, [x], [out], inits)
    taskset = extract(model, tmp_path, batch=SymbolDecl(min=1, max=8))
    assert [t.signature.name for t in taskset.tasks] == [
        "matmul_add_div_erf_mul",
        "rms_norm",
        "softmax",
        "layer_norm",
    ]
    gelu, rms, _, norm = taskset.tasks
    assert gelu.source_ops == ["MatMul_0", "Add_1", "Div_2", "Erf_3", "Add_4", "Mul_5", "Mul_6"]
    assert gelu.signature.outputs == ["gelu"] and rms.signature.outputs == ["y"]
    assert norm.signature.outputs == ["out"]
    assert rms.source_ops[0] == "Pow_7"  # the square before the mean is its prologue
    assert taskset.symbols == {
        "batch": SymbolDecl(min=1, max=8),
        "seq": SymbolDecl(min=1, max=4096),
    }
    assert taskset.left_out == [] and taskset.flops.share == 1.0
    assert taskset.flops.at == {"batch": 8, "seq": 64}
    # The scalar initializers are literals, at their float32 value's shortest text.
    assert "1e-06" in rms.signature.computes[3].expr
    feeds = {"X": RNG.standard_normal((2, 3, 8)).astype(np.float32)}
    check_against_onnx(model, taskset, feeds, {"batch": 2, "seq": 3})


def test_a_layer_norm_written_as_two_means_is_one_kernel(tmp_path: Path) -> None:
    """As exporters before opset 17 write it: mean, sub, pow, mean, add, sqrt, div, mul,
    add; the second mean reduces the same rows, so it joins the first one's kernel."""
    nodes = [
        helper.make_node("Constant", [], ["eps"], value_float=1e-5),
        helper.make_node("ReduceMean", ["X"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["X", "mean"], ["centered"]),
        helper.make_node("Pow", ["centered", "two"], ["squares"]),
        helper.make_node("ReduceMean", ["squares"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["var_eps"]),
        helper.make_node("Sqrt", ["var_eps"], ["std"]),
        helper.make_node("Div", ["centered", "std"], ["normed"]),
        helper.make_node("Mul", ["normed", "w"], ["scaled"]),
        helper.make_node("Add", ["scaled", "b"], ["Y"]),
    ]
    inits = [scalar("two", 2.0), weight("w", 16), weight("b", 16)]
    x = helper.make_tensor_value_info("X", F32, ["rows", 16])
    y = helper.make_tensor_value_info("Y", F32, ["rows", 16])
    model = build(nodes, [x], [y], inits)
    taskset = extract(model, tmp_path)
    (task,) = taskset.tasks
    assert task.signature.name == "layer_norm" and len(task.source_ops) == 9
    check_against_onnx(model, taskset, {"X": RNG.standard_normal((5, 16), np.float32)}, {"rows": 5})


def test_gemm_conv_and_layout_ops_match_the_reference_evaluator(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Conv", ["img", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "gw", "gb"], ["g"], transB=1, alpha=0.5),
        helper.make_node("Reshape", ["g", "shape"], ["g3"]),
        helper.make_node("Transpose", ["g3"], ["t"], perm=[0, 2, 1]),
        helper.make_node("ReduceMax", ["t"], ["m"], axes=[1], keepdims=0),
        helper.make_node("Cast", ["m"], ["out"], to=TensorProto.FLOAT16),
    ]
    inits = [
        weight("cw", 4, 3, 3, 3),
        weight("cb", 4),
        weight("gw", 6, 64),
        weight("gb", 6),
        numpy_helper.from_array(np.array([2, 2, 3], np.int64), "shape"),
    ]
    img = helper.make_tensor_value_info("img", F32, [2, 3, 8, 8])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT16, [2, 2])
    model = build(nodes, [img], [out], inits)
    taskset = extract(model, tmp_path)
    # The reshapes and the transpose are views, read through: no part of a kernel's name.
    assert [t.signature.name for t in taskset.tasks] == ["conv2d_relu", "gemm", "reduce_cast"]
    assert taskset.left_out == []
    check_against_onnx(model, taskset, {"img": RNG.standard_normal((2, 3, 8, 8), np.float32)}, {})


def nibbles(rng: np.random.Generator, rows: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Random 4-bit values, and the same packed two per byte, the even one in the low bits."""
    levels = rng.integers(0, 16, (rows, count)).astype(np.uint8)
    return levels, (levels[:, 0::2] | levels[:, 1::2] << 4).astype(np.uint8)


@pytest.mark.parametrize("zero_points", ["none", "packed", "float"])
def test_matmul_nbits_dequantizes_its_packed_layout(tmp_path: Path, zero_points: str) -> None:
    """onnxruntime's MatMulNBits: B [N, blocks, block/2] uint8, scales [N * blocks], zero
    points packed like B (or floats, or 8 without); checked against the layout by hand."""
    k, n, block = 64, 24, 16
    blocks = k // block
    levels, packed = nibbles(RNG, n, k)
    scales = RNG.random(n * blocks).astype(np.float32)
    inputs = ["A", "B", "scales", ""]  # then zero points, g_idx and the bias
    inits = [
        numpy_helper.from_array(packed.reshape(n, blocks, block // 2), "B"),
        numpy_helper.from_array(scales, "scales"),
    ]
    zeros = np.full((n, blocks), 8.0, np.float32)
    if zero_points == "packed":
        zero_levels, zero_packed = nibbles(RNG, n, blocks)
        zeros = zero_levels.astype(np.float32)
        inits.append(numpy_helper.from_array(zero_packed.reshape(-1), "zeros"))
        inputs[3] = "zeros"
    elif zero_points == "float":
        zeros = RNG.random((n, blocks)).astype(np.float32) * 15
        inits.append(numpy_helper.from_array(zeros.reshape(-1), "zeros"))
        inputs[3] = "zeros"
    inputs += ["", "bias"]
    inits.append(weight("bias", n))
    node = helper.make_node(
        "MatMulNBits", inputs, ["Y"], domain="com.microsoft", K=k, N=n, bits=4, block_size=block
    )
    a = helper.make_tensor_value_info("A", F32, ["seq", k])
    y = helper.make_tensor_value_info("Y", F32, ["seq", n])
    taskset = extract(build([node], [a], [y], inits), tmp_path)
    (task,) = taskset.tasks
    assert task.signature.name == "matmul_nbits" and taskset.symbols == {
        "seq": SymbolDecl(min=1, max=4096)
    }
    program = load(task.signature)
    values = {t.name: numpy_helper.to_array(t) for t in inits}
    values["A"] = RNG.standard_normal((5, k)).astype(np.float32)
    (got,) = evaluate(program, values, {"seq": 5}).values()
    dequantized = (levels - np.repeat(zeros, block, axis=1)) * np.repeat(
        scales.reshape(n, blocks), block, axis=1
    )
    expected = values["A"] @ dequantized.T + values["bias"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_identical_blocks_collapse_and_unmapped_ops_are_listed(tmp_path: Path) -> None:
    """Two layers that differ only in their weights' names are one task of weight 2; a
    Hardmax and a TopK are left out, counted and named, and nothing crashes."""
    nodes, inits = [], []
    for layer in range(2):
        x = "X" if layer == 0 else "h0"
        nodes += [
            helper.make_node("MatMul", [x, f"w{layer}"], [f"m{layer}"]),
            helper.make_node("Add", [f"m{layer}", f"b{layer}"], [f"h{layer}"]),
        ]
        inits += [weight(f"w{layer}", 16, 16), weight(f"b{layer}", 16)]
    nodes += [
        helper.make_node("Hardmax", ["h1"], ["g"]),
        helper.make_node("TopK", ["g", "kk"], ["top", "top_i"]),
    ]
    inits += [numpy_helper.from_array(np.array([2], np.int64), "kk")]
    x = helper.make_tensor_value_info("X", F32, ["seq", 16])
    out = helper.make_tensor_value_info("top", F32, ["seq", 2])
    taskset = extract(build(nodes, [x], [out], inits), tmp_path)
    (task,) = taskset.tasks
    assert task.weight == 2 and task.source_ops == ["MatMul_0", "Add_1", "MatMul_2", "Add_3"]
    assert [(e.op, e.count, e.reason) for e in taskset.left_out] == [
        ("Hardmax", 1, "no mapping for Hardmax"),
        ("TopK", 1, "no mapping for TopK"),
    ]
    assert taskset.left_out[0].flops == 64 * 16  # its output's elements, seq at 64
    assert 0 < taskset.flops.share < 1


def test_a_symbolic_dimension_and_its_random_inputs(tmp_path: Path) -> None:
    nodes = [helper.make_node("Sigmoid", ["X"], ["s"]), helper.make_node("Mul", ["X", "s"], ["Y"])]
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT16, ["tokens", 4])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT16, ["tokens", 4])
    model = build(nodes, [x], [y], [])
    (task,) = extract(model, tmp_path).tasks
    assert task.signature.symbols == {"tokens": SymbolDecl(min=1, max=4096)}
    feeds = random_inputs(load(task.signature), {"tokens": 7}, seed=0)
    check_against_onnx(model, extract(model, tmp_path), feeds, {"tokens": 7})


@pytest.mark.parametrize("data", [b"not a model at all", b"\x08\x07\x12\x00\xff\xff", b""])
def test_a_malformed_file_is_refused_in_one_line(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(data)
    with pytest.raises(ModelError, match=r"bad.onnx: not a valid ONNX model") as refused:
        onnx_model.read(path)
    assert "\n" not in str(refused.value)


def test_shape_arithmetic_is_folded_and_its_reshape_is_a_view(tmp_path: Path) -> None:
    """Shape, Gather, Unsqueeze and Concat computing a Reshape's target (as exporters write
    a flatten) are folded when the file is read: the Reshape is a view, and the one kernel
    is the Relu that reads it."""
    nodes = [
        helper.make_node("Shape", ["X"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["X", "target"], ["flat"]),
        helper.make_node("Relu", ["flat"], ["Y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
    ]
    x = helper.make_tensor_value_info("X", F32, [2, 3, 4])
    y = helper.make_tensor_value_info("Y", F32, [2, 12])
    model = build(nodes, [x], [y], inits)
    taskset = extract(model, tmp_path)
    assert [t.signature.name for t in taskset.tasks] == ["relu"] and taskset.left_out == []
    folded = {e.op for e in taskset.no_kernel if e.reason.startswith("computed once")}
    assert folded == {"Shape", "Gather", "Unsqueeze", "Concat"}
    check_against_onnx(model, taskset, {"X": RNG.standard_normal((2, 3, 4), np.float32)}, {})
