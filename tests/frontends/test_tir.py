"""The TIR frontend on TVMScript as MLC-LLM prints it: the five-block int4 linear of the seed
document maps block for block and computes what its blocks compute; identical functions
collapse; functions outside the form are listed with their reasons; text that is not
TVMScript is refused."""

from __future__ import annotations

import numpy as np
import pytest

from tests.frontends.tir_texts import MLC_INT4_LINEAR, SOFTMAX, module
from tunehub.compiler.inputs import random_inputs
from tunehub.compiler.program import load
from tunehub.compiler.reference import evaluate
from tunehub.frontends import tir
from tunehub.frontends.errors import ModelError
from tunehub.schemas.signature import SymbolDecl


def test_the_mlc_int4_linear_maps_block_for_block() -> None:
    taskset = tir.read(MLC_INT4_LINEAR, "phase3.py")
    assert taskset.left_out == [] and len(taskset.tasks) == 1
    (task,) = taskset.tasks
    sig = task.signature
    assert sig.name == "fused_fused_dequantize1_fused_NT_matmul6_add7_add8"
    assert task.weight == 1 and task.source_ops == [sig.name]
    assert sig.symbols == {"seq_len": SymbolDecl(min=1, max=4096)} == taskset.symbols
    assert [(t.name, t.shape, t.dtype) for t in sig.inputs] == [
        ("lv397", [1024, 128], "uint32"),
        ("lv398", [1024, 32], "float16"),
        ("reshape195", [1, "seq_len", 1024], "float16"),
        ("transformer_h_0_attn_c_proj_bias3", [1024], "float16"),
        ("add290", [1, "seq_len", 1024], "float16"),
    ]
    compute, dequantize, matmul, add, add_1 = sig.computes
    assert compute.axes == ["v_i0", "v_i1"] and compute.dtype == "float16"
    assert compute.expr == "float16(((lv397[v_i0, (v_i1 // 8)] >> uint32(((v_i1 % 8) * 4))) & 15))"
    assert dequantize.expr == ("((compute[v_i0, v_i1] - 7.0) * lv398[v_i0, (v_i1 // 32)])")
    # The matmul over the unit batch axis, a float16 sum as written; version 2: its products
    # are summed unrounded, as tensor cores do.
    assert sig.version == 2
    assert matmul.name == "NT_matmul_intermediate" and matmul.shape == [1, "seq_len", 1024]
    assert matmul.dtype == "float16" and matmul.reduce is not None
    assert (matmul.reduce.op, matmul.reduce.axes) == ("sum", {"v_k": 1024})
    assert matmul.expr == (
        "(reshape195[v_i0, v_i1, v_k] * dequantize_intermediate_intermediate[v_i2, v_k])"
    )
    assert add.axes == ["v_ax0", "v_ax1", "v_ax2"] and add_1.name in sig.outputs
    assert sig.outputs == ["T_add_intermediate_1_intermediate"]
    assert task.flops == 2 * 64 * 1024 * 1024 + 2 * 1024 * 1024 + 2 * 64 * 1024


def test_the_mlc_int4_linear_computes_what_its_blocks_compute() -> None:
    (task,) = tir.read(MLC_INT4_LINEAR, "phase3.py").tasks
    program = load(task.signature)
    symbols = {"seq_len": 3}
    inputs = random_inputs(program, symbols, seed=1)
    (out,) = evaluate(program, inputs, symbols).values()

    packed, scales = inputs["lv397"], inputs["lv398"]
    k = np.arange(1024)
    levels = (packed[:, k // 8] >> (4 * (k % 8)).astype(np.uint32)) & 15
    weight = (levels.astype(np.float16) - np.float16(7)) * scales[:, k // 32]
    x = inputs["reshape195"].astype(np.float32)
    matmul = np.einsum("bsk,nk->bsn", x, weight.astype(np.float32)).astype(np.float16)
    bias = inputs["transformer_h_0_attn_c_proj_bias3"]
    expected = (matmul + bias) + inputs["add290"]
    # float32 sums of unrounded products: only the order of the sum differs from einsum's,
    # which may move a float16 rounding by one step.
    scale = np.abs(expected.astype(np.float32)).max()
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32),
                               rtol=2e-3, atol=2e-3 * scale)  # fmt: skip


def test_a_reduction_with_min_value_init_and_t_calls() -> None:
    (task,) = tir.read(SOFTMAX, "softmax.py").tasks
    top, total, out = task.signature.computes
    assert top.reduce is not None and top.reduce.op == "max"
    assert total.reduce is not None and total.reduce.op == "sum"
    assert out.expr == "(exp((x[v_i0, v_i1] - x_maxelem[v_i0])) / x_expsum[v_i0])"
    program = load(task.signature)
    inputs = random_inputs(program, {"n": 5}, seed=0)
    (y,) = evaluate(program, inputs, {"n": 5}).values()
    x = inputs["x"].astype(np.float64)
    expected = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, expected / expected.sum(1, keepdims=True), rtol=1e-5)


def test_identical_functions_collapse_and_weigh_as_many() -> None:
    """MLC names every layer's kernel anew (`..._add8`, `..._add9`): one task all the same."""
    renamed = MLC_INT4_LINEAR.replace("add7_add8", "add9_add10").replace("lv397", "lv401")
    taskset = tir.read(module(MLC_INT4_LINEAR, renamed, SOFTMAX), "model.py")
    assert [t.weight for t in taskset.tasks] == [2, 1]
    assert taskset.tasks[0].source_ops == [
        "fused_fused_dequantize1_fused_NT_matmul6_add7_add8",
        "fused_fused_dequantize1_fused_NT_matmul6_add9_add10",
    ]
    assert set(taskset.symbols) == {"seq_len", "n"}
    covered = 2 * taskset.tasks[0].flops + taskset.tasks[1].flops
    assert taskset.flops.covered == covered == taskset.flops.total


SCHEDULED = """
    @T.prim_func
    def scheduled(A: T.Buffer((T.int64(64),), "float32"), B: T.Buffer((T.int64(64),), "float32")):
        for i in T.thread_binding(T.int64(64), thread="threadIdx.x"):
            with T.block("B"):
                v = T.axis.spatial(T.int64(64), i)
                B[v] = A[v] * T.float32(2)
"""
HOOKED = """
    @T.prim_func
    def hooked(A: T.Buffer((T.int64(8),), "float32"), B: T.Buffer((T.int64(8),), "float32")):
        T.call_extern("int32", "system", "echo hi")
        for i in T.serial(T.int64(8)):
            with T.block("B"):
                v = T.axis.spatial(T.int64(8), i)
                B[v] = A[v]
"""
BIASED_INIT = """
    @T.prim_func
    def biased(A: T.Buffer((T.int64(8), T.int64(4)), "float32"), B: T.Buffer((T.int64(8),), "float32")):
        for i, k in T.grid(T.int64(8), T.int64(4)):
            with T.block("B"):
                v_i, v_k = T.axis.remap("SR", [i, k])
                with T.init():
                    B[v_i] = T.float32(1)
                B[v_i] = B[v_i] + A[v_i, v_k]
"""  # noqa: E501
TRANSPOSED_STORE = """
    @T.prim_func
    def transposed(A: T.Buffer((T.int64(4), T.int64(8)), "float32"), B: T.Buffer((T.int64(8), T.int64(4)), "float32")):
        for i, j in T.grid(T.int64(4), T.int64(8)):
            with T.block("B"):
                v_i, v_j = T.axis.remap("SS", [i, j])
                B[v_j, v_i] = A[v_i, v_j]
"""  # noqa: E501


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (SCHEDULED, "a scheduled function (loops bound to threads)"),
        (HOOKED, "`T.call_extern('int32', 'system', 'echo hi')` is not mapped"),
        (BIASED_INIT, "a reduction without T.init() to the identity of sum"),
        (TRANSPOSED_STORE, "block writes B[v_j, v_i], not the buffer at its spatial axes"),
    ],
)
def test_a_function_outside_the_form_is_left_out_with_its_reason(text: str, reason: str) -> None:
    taskset = tir.read(module(text, SOFTMAX), "model.py")
    assert [t.signature.name for t in taskset.tasks] == ["softmax"]
    (left,) = taskset.left_out
    assert left.op == "prim_func" and left.count == 1 and reason in left.reason
    assert "\n" not in left.reason


def test_floor_division_of_a_signed_index_is_corrected() -> None:
    """TIR's `//` and `%` floor; on an operand that may be negative the signature's
    truncating ones are corrected, so a shifted window reads what TIR reads."""
    text = """
    @T.prim_func
    def shifted(A: T.Buffer((T.int64(8),), "int32"), B: T.Buffer((T.int64(8),), "int32")):
        for i in T.serial(T.int64(8)):
            with T.block("B"):
                v = T.axis.spatial(T.int64(8), i)
                B[v] = A[v] * T.int32(0) + T.Cast("int32", (v - T.int64(3)) // T.int64(2)) * T.int32(10) + T.Cast("int32", (v - T.int64(3)) % T.int64(2))
    """  # noqa: E501
    (task,) = tir.read(text, "shifted.py").tasks
    program = load(task.signature)
    (out,) = evaluate(program, {"A": np.ones(8, np.int32)}, {}).values()
    v = np.arange(8) - 3
    np.testing.assert_array_equal(out, (v // 2) * 10 + v % 2)


RMS_NORM_PADDED = """
    @T.prim_func
    def rms_window(A: T.Buffer((T.int64(4), T.int64(8)), "float32"), W: T.Buffer((T.int64(8),), "float32"), B: T.Buffer((T.int64(4), T.int64(8)), "float32")):
        sq = T.alloc_buffer((T.int64(4),))
        for i, k in T.grid(T.int64(4), T.int64(8)):
            with T.block("sq"):
                v_i, v_k = T.axis.remap("SR", [i, k])
                with T.init():
                    sq[v_i] = T.float32(0)
                sq[v_i] = sq[v_i] + A[v_i, v_k] * A[v_i, v_k]
        for i, j in T.grid(T.int64(4), T.int64(8)):
            with T.block("B"):
                v_i, v_j = T.axis.remap("SS", [i, j])
                B[v_i, v_j] = A[v_i, v_j] * T.rsqrt(sq[v_i] / T.float32(8) + T.float32(1e-5)) * W[v_j] + T.if_then_else(v_j >= T.int64(1) and v_j < T.int64(8), A[v_i, v_j - T.int64(1)], T.float32(0))
"""  # noqa: E501


def test_rsqrt_and_a_guarded_read() -> None:
    """`T.if_then_else` is the signature's `where`, which may read out of bounds on the
    branch it does not take (padding), as TIR's does."""
    (task,) = tir.read(RMS_NORM_PADDED, "rms.py").tasks
    program = load(task.signature)
    inputs = random_inputs(program, {}, seed=2)
    (out,) = evaluate(program, inputs, {}).values()
    a, w = inputs["A"].astype(np.float64), inputs["W"].astype(np.float64)
    normed = a / np.sqrt((a * a).mean(1, keepdims=True) + 1e-5) * w
    shifted = np.concatenate([np.zeros((4, 1)), a[:, :-1]], axis=1)
    np.testing.assert_allclose(out, normed + shifted, rtol=1e-5, atol=1e-6)


def test_ranges_named_by_the_caller() -> None:
    taskset = tir.read(SOFTMAX, "s.py", {"n": SymbolDecl(min=1, max=128)})
    assert taskset.tasks[0].signature.symbols == {"n": SymbolDecl(min=1, max=128)}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("def f(:\n", "s.py: not TVMScript: line 1"),
        ("x = 1\n", "s.py: no prim_func in it"),
        ("\0", "s.py: not TVMScript"),
    ],
)
def test_text_that_is_not_tvmscript_is_refused(text: str, message: str) -> None:
    with pytest.raises(ModelError, match=message) as refused:
        tir.read(text, "s.py")
    assert "\n" not in str(refused.value)
