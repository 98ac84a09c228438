"""The ONNX ops of convolutional networks, and the model zoo graphs the `onnx` wheel ships
(`onnx/backend/test/data/light`): every op that computes values is mapped, and every task's
kernel (this host's C, the naive config) computes what ONNX's reference evaluator does,
alone and chained through a whole model."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.compiler.cbuild import HOST, run
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.verify import compare, reduce_extent
from tunehub.frontends import fusion, onnx_model
from tunehub.frontends.graph import Graph
from tunehub.frontends.taskset import Found, signature_flops

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx.reference.op_run import OpRun  # noqa: E402
from onnx.reference.ops.op_lrn import LRN as ReferenceLRN  # noqa: E402

F32 = TensorProto.FLOAT
ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(path.stem.removeprefix("light_") for path in ZOO.glob("light_*.onnx"))


class LRN(ReferenceLRN):
    """ONNX's LRN as its specification says: the reference evaluator's (onnx 1.23) loops over
    the batch where it means the channels, so channels past the batch size sum nothing."""

    def _run(self, x: np.ndarray, alpha: float, beta: float, bias: float, size: int) -> Any:
        squares = np.zeros_like(x)
        for c in range(x.shape[1]):
            window = x[:, max(0, c - (size - 1) // 2) : c + size // 2 + 1]
            squares[:, c] = np.sum(window**2, axis=1)
        return ((x / (bias + alpha / size * squares) ** beta).astype(x.dtype),)


class Softmax(OpRun):
    """Softmax before opset 13, as its specification says: over all dimensions from `axis`
    on (the reference evaluator's takes opset 13's meaning, one dimension, at every opset)."""

    def _run(self, x: np.ndarray, axis: int = 1) -> Any:
        given = [a.i for a in self.onnx_node.attribute if a.name == "axis"]
        axis = given[0] if given else 1  # the evaluator passes opset 13's default, -1
        rows = x.reshape(int(np.prod(x.shape[:axis])), -1)
        exps = np.exp(rows - rows.max(axis=1, keepdims=True))
        return ((exps / exps.sum(axis=1, keepdims=True)).reshape(x.shape).astype(x.dtype),)


class BatchNormalization(OpRun):
    """BatchNormalization at opsets 9 to 13 in inference, as specified (the reference
    evaluator's blends in the batch's statistics whenever `momentum` has a value, and gives
    it its default)."""

    def _run(self, x: np.ndarray, *params: np.ndarray, **attrs: Any) -> Any:
        scale, bias, mean, var = (p.reshape(-1, *[1] * (x.ndim - 2)) for p in params)
        eps = attrs.get("epsilon") or 1e-5
        return ((scale * (x - mean) / np.sqrt(var + eps) + bias).astype(x.dtype),)


def reference(model: Any) -> ReferenceEvaluator:
    """ONNX's reference evaluator with the ops above as specified for `model`'s opset."""
    old = model.opset_import[0].version < 13
    return ReferenceEvaluator(model, new_ops=[LRN, Softmax, BatchNormalization] if old else [LRN])


class Weights(dict[str, np.ndarray]):
    """A model's weights, made when first read: its initializers, and for every other
    constant (the zoo's ConstantOfShape stand-ins) uniform values in [0.5, 1.5), positive
    as a batch norm's variance must be."""

    def __init__(self, model: Any, graph: Graph, seed: int = 0) -> None:
        super().__init__({t.name: numpy_helper.to_array(t) for t in model.graph.initializer})
        self.graph, self.rng = graph, np.random.default_rng(seed)

    def __missing__(self, name: str) -> np.ndarray:
        shape = self.graph.values[name].shape
        self[name] = self.rng.uniform(0.5, 1.5, shape).astype(np.float32)
        return self[name]


def kernel_outputs(found: Found, values: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The task's kernel, lowered for this host with the naive config, run on `values` (by
    the graph's names): its outputs by the graph's names, each with its program and name."""
    program = load(found.signature)
    assert found.binding is not None
    inputs = {
        decl.name: np.ascontiguousarray(values[value]).reshape(program.shape_of(decl.name, {}))
        for decl, value in zip(program.inputs, found.binding.inputs, strict=True)
    }
    kernel = lower(program, HOST, space_for(program, HOST).naive())
    got = run(kernel, program, inputs, {})
    return {
        value: (got[name], program, name)
        for value, name in zip(found.binding.outputs, found.signature.outputs, strict=True)
    }


def check(expected: np.ndarray, got: tuple[np.ndarray, Any, str], label: Any = "") -> None:
    """The kernel's output has the reference's elements (held in its own shape: a rank-0
    tensor is `[1]`) and values, within the verifier's tolerance."""
    actual, program, name = got
    assert expected.size == actual.size, (label, name, expected.shape, actual.shape)
    extent = reduce_extent(program, name, {})
    result = compare(expected.reshape(actual.shape), actual, "float32", reduce_extent=extent)
    assert result.ok, (label, name, result)


def check_tasks(tasks: Iterable[Found], values: Mapping[str, np.ndarray]) -> None:
    """Each task's kernel, fed `values` (the reference's, and the folded constants), returns
    the reference's values for its outputs."""
    for found in tasks:
        for value, got in kernel_outputs(found, values).items():
            check(np.asarray(values[value]), got)


def loaded(model: Any, tmp_path: Path) -> tuple[Graph, fusion.Extraction]:
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    return onnx_model.load(path)


def cnn_model() -> Any:
    """Every CNN op once or more: a conv with its batch norm, pools with and without padding,
    ceil_mode and count_include_pad, LRN, Concat, Sum, a global pool, Flatten, a Gemm with
    its batch norm, Dropout, and a Gather of negative indices."""
    rng = np.random.default_rng(1)

    def w(name: str, *shape: int, low: float = -1.0) -> Any:
        return numpy_helper.from_array(rng.uniform(low, 1.0, shape).astype(np.float32), name)

    def bn(prefix: str, channels: int) -> list[Any]:
        return [w(f"{prefix}_{p}", channels, low=0.5) for p in ("s", "b", "m", "v")]

    nodes = [
        helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", *[f"bn1_{p}" for p in "sbmv"]], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node(
            "MaxPool", ["r"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
        ),
        helper.make_node("LRN", ["mp"], ["l"], size=3, alpha=1e-3, beta=0.75, bias=2.0),
        helper.make_node("AveragePool", ["l"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node(
            "AveragePool",
            ["l"],
            ["aq"],
            kernel_shape=[2, 2],
            strides=[2, 2],
            pads=[1, 1, 0, 0],
            ceil_mode=1,
            count_include_pad=1,
        ),
        helper.make_node("MaxPool", ["aq"], ["mq"], kernel_shape=[2, 2], ceil_mode=1),
        helper.make_node("Concat", ["ap", "l"], ["cat"], axis=1),
        helper.make_node("Sum", ["cat", "cat", "bias"], ["sum"]),
        helper.make_node("GlobalAveragePool", ["sum"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "gw"], ["gm"], transB=1),
        helper.make_node("BatchNormalization", ["gm", *[f"bn2_{p}" for p in "sbmv"]], ["gn"]),
        helper.make_node("Dropout", ["gn"], ["d"]),
        helper.make_node("Gather", ["d", "idx"], ["out"], axis=1),
    ]
    inits = [
        w("cw", 4, 3, 3, 3),
        *bn("bn1", 4),
        w("bias", 8, 1, 1),
        w("gw", 5, 8),
        *bn("bn2", 5),
        numpy_helper.from_array(np.array([[4, -1], [0, 2]], np.int64), "idx"),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", F32, [2, 3, 10, 10])],
        [
            helper.make_tensor_value_info("out", F32, [2, 2, 2]),
            helper.make_tensor_value_info("mq", F32, [2, 4, 2, 2]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def test_every_cnn_op_is_mapped_and_its_kernels_match_the_reference(tmp_path: Path) -> None:
    """The batch norms fold into their conv's and gemm's epilogues as a per-channel scale and
    shift computed once (their statistics no input of a kernel); the others are tasks whose
    kernels compute what ONNX's reference evaluator does."""
    model = cnn_model()
    graph, found = loaded(model, tmp_path)
    assert found.skipped == []
    names = [task.signature.name for task in found.found]
    assert names[0] == "conv2d_mul_add_relu" and "gemm_mul_add_gather" in names
    conv = found.found[0]
    assert conv.binding is not None and not {"bn1_m", "bn1_v"} & set(conv.binding.inputs)
    feeds = {"x": np.random.default_rng(2).uniform(-1, 1, (2, 3, 10, 10)).astype(np.float32)}
    values = Weights(model, graph)
    values.update(feeds | reference(model).run(None, feeds, intermediate=True))
    values.update(fusion.fold(graph, found.folded, values))
    check_tasks(found.found, values)


def test_a_computed_index_gathers_with_bounds_guarded(tmp_path: Path) -> None:
    """Indices computed at run time (so no read is provably in bounds) pick rows as ONNX's
    Gather does, negative ones from the end."""
    nodes = [
        helper.make_node("Cast", ["i"], ["ic"], to=TensorProto.INT64),
        helper.make_node("Gather", ["table", "ic"], ["rows"], axis=0),
        helper.make_node("Relu", ["rows"], ["out"]),
    ]
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(6, 2) - 5, "table")
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "gather",
            [helper.make_tensor_value_info("i", TensorProto.INT32, [3])],
            [helper.make_tensor_value_info("out", F32, [3, 2])],
            [table],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    graph, found = loaded(model, tmp_path)
    assert [task.signature.name for task in found.found] == ["cast_gather_relu"]
    feeds = {"i": np.array([5, -6, 1], np.int32)}
    values = Weights(model, graph)
    values.update(feeds | reference(model).run(None, feeds, intermediate=True))
    check_tasks(found.found, values)


@pytest.mark.parametrize("name", MODELS)
def test_a_zoo_model_extracts_whole(name: str) -> None:
    """At least 95% of the FLOPs in tasks, and no op that computes values left out: only
    ConstantOfShape (the zoo's stand-in for a weight) needs no kernel besides views and
    folded constants."""
    taskset = onnx_model.read(ZOO / f"light_{name}.onnx")
    assert taskset.left_out == []
    assert taskset.flops.covered >= 0.95 * taskset.flops.total
    reasons = {(entry.op, entry.reason) for entry in taskset.no_kernel}
    assert {op for op, why in reasons if why == onnx_model.WEIGHT} <= {"ConstantOfShape"}
    assert {why for _, why in reasons} <= {onnx_model.WEIGHT, fusion.A_VIEW, fusion.FOLDED}


def test_squeezenet_run_task_by_task_is_the_reference_end_to_end() -> None:
    """SqueezeNet from its input alone: each task's kernel reads what earlier kernels wrote
    (and the weights), and every value it writes, the probabilities included, is ONNX's
    reference evaluator's."""
    model = onnx.load(str(ZOO / "light_squeezenet.onnx"))
    graph, found = onnx_model.load(ZOO / "light_squeezenet.onnx")
    feeds = {"data_0": np.random.default_rng(3).uniform(0, 1, (1, 3, 224, 224)).astype("f4")}
    expected = feeds | reference(model).run(None, feeds, intermediate=True)
    values: dict[str, np.ndarray] = dict(feeds)
    values |= {f.name: expected[f.name] for f in graph.folded}  # the weights
    values |= {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    values |= fusion.fold(graph, found.folded, values)
    for task in found.found:  # in an order they can run in: what each reads is written
        for value, got in kernel_outputs(task, values).items():
            check(expected[value], got)
            values[value] = got[0]
    assert "softmaxout_1" in values and graph.outputs == ["softmaxout_1"]


def zoo_tasks() -> list[tuple[tuple[str, ...], str, Graph, fusion.Extraction, Found]]:
    """Across the zoo, for each set of op types a task is made of, its task of fewest FLOPs,
    with its model's name, graph and extraction."""
    chosen: dict[tuple[str, ...], tuple[int, str, Graph, fusion.Extraction, Found]] = {}
    for name in MODELS:
        graph, found = onnx_model.load(ZOO / f"light_{name}.onnx")
        for task in found.found:
            kinds = tuple(sorted({source.op_type for source in task.sources}))
            flops = signature_flops(task.signature.computes, {})
            if kinds not in chosen or flops < chosen[kinds][0]:
                chosen[kinds] = (flops, name, graph, found, task)
    return [(kinds, *entry[1:]) for kinds, entry in chosen.items()]


def test_each_kind_of_zoo_task_matches_the_reference() -> None:
    """Each kind of task of the zoo (by the op types it is made of), its smallest: the
    kernel, fed random activations and weights, computes what the reference evaluator
    computes from the model's own nodes of that task."""
    rng = np.random.default_rng(4)
    for kinds, name, graph, found, task in zoo_tasks():
        model = onnx.load(str(ZOO / f"light_{name}.onnx"))
        assert task.binding is not None
        inside = {*task.binding.computed, *task.binding.views}
        nodes = [n for n in model.graph.node if n.output and n.output[0] in inside]
        made = {out for n in nodes for out in n.output}
        reads = dict.fromkeys(v for n in nodes for v in n.input if v and v not in made)
        weights = Weights(model, graph)
        feeds = {
            v: weights[v]
            if graph.values[v].constant
            else rng.uniform(-1, 1, graph.values[v].shape).astype(np.float32)
            for v in reads
        }
        sub = helper.make_graph(
            nodes,
            "task",
            [
                helper.make_tensor_value_info(v, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                for v, a in feeds.items()
            ],
            [helper.make_tensor_value_info(v, F32, None) for v in task.binding.outputs],
        )
        opsets = [helper.make_opsetid("", model.opset_import[0].version)]
        evaluator = reference(helper.make_model(sub, opset_imports=opsets))
        expected = dict(zip(task.binding.outputs, evaluator.run(None, feeds), strict=True))
        weights.update(feeds)
        weights.update(fusion.fold(graph, found.folded, weights))
        for value, got in kernel_outputs(task, weights).items():
            check(expected[value], got, kinds)
