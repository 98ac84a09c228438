"""TVMScript texts as MLC-LLM prints them, for the TIR frontend's tests and the CLI's.

`MLC_INT4_LINEAR` is the five-block function of the MLC-LLM seed document, as printed after
phase 3 (GPT-2's attention projection: int4 weights, a bias and a residual add)."""

from __future__ import annotations

MLC_INT4_LINEAR = """
    def fused_fused_dequantize1_fused_NT_matmul6_add7_add8(lv397: T.Buffer((T.int64(1024), T.int64(128)), "uint32"), lv398: T.Buffer((T.int64(1024), T.int64(32)), "float16"), p_reshape195: T.handle, transformer_h_0_attn_c_proj_bias3: T.Buffer((T.int64(1024),), "float16"), p_add290: T.handle, p_output0: T.handle):
        T.func_attr({"tir.noalias": T.bool(True)})
        seq_len = T.int64()
        reshape195 = T.match_buffer(p_reshape195, (T.int64(1), seq_len, T.int64(1024)), "float16")
        add290 = T.match_buffer(p_add290, (T.int64(1), seq_len, T.int64(1024)), "float16")
        T_add_intermediate_1_intermediate = T.match_buffer(p_output0, (T.int64(1), seq_len, T.int64(1024)), "float16")
        # with T.block("root"):
        compute = T.alloc_buffer((T.int64(1024), T.int64(1024)), "float16")
        dequantize_intermediate_intermediate = T.alloc_buffer((T.int64(1024), T.int64(1024)), "float16")
        NT_matmul_intermediate = T.alloc_buffer((T.int64(1), seq_len, T.int64(1024)), "float16")
        T_add_intermediate = T.alloc_buffer((T.int64(1), seq_len, T.int64(1024)), "float16")
        for i0, i1 in T.grid(T.int64(1024), T.int64(1024)):
            with T.block("compute"):
                v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
                T.reads(lv397[v_i0, v_i1 // T.int64(8)])
                T.writes(compute[v_i0, v_i1])
                compute[v_i0, v_i1] = T.Cast("float16", T.bitwise_and(T.shift_right(lv397[v_i0, v_i1 // T.int64(8)], T.Cast("uint32", v_i1 % T.int64(8) * T.int64(4))), T.uint32(15)))
        for i0, i1 in T.grid(T.int64(1024), T.int64(1024)):
            with T.block("dequantize"):
                v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
                T.reads(compute[v_i0, v_i1], lv398[v_i0, v_i1 // T.int64(32)])
                T.writes(dequantize_intermediate_intermediate[v_i0, v_i1])
                dequantize_intermediate_intermediate[v_i0, v_i1] = (compute[v_i0, v_i1] - T.float16(7)) * lv398[v_i0, v_i1 // T.int64(32)]
        for i0, i1, i2, k in T.grid(T.int64(1), seq_len, T.int64(1024), T.int64(1024)):
            with T.block("NT_matmul"):
                v_i0, v_i1, v_i2, v_k = T.axis.remap("SSSR", [i0, i1, i2, k])
                T.reads(reshape195[v_i0, v_i1, v_k], dequantize_intermediate_intermediate[v_i2, v_k])
                T.writes(NT_matmul_intermediate[v_i0, v_i1, v_i2])
                with T.init():
                    NT_matmul_intermediate[v_i0, v_i1, v_i2] = T.float16(0)
                NT_matmul_intermediate[v_i0, v_i1, v_i2] = NT_matmul_intermediate[v_i0, v_i1, v_i2] + reshape195[v_i0, v_i1, v_k] * dequantize_intermediate_intermediate[v_i2, v_k]
        for ax0, ax1, ax2 in T.grid(T.int64(1), seq_len, T.int64(1024)):
            with T.block("T_add"):
                v_ax0, v_ax1, v_ax2 = T.axis.remap("SSS", [ax0, ax1, ax2])
                T.reads(NT_matmul_intermediate[v_ax0, v_ax1, v_ax2], transformer_h_0_attn_c_proj_bias3[v_ax2])
                T.writes(T_add_intermediate[v_ax0, v_ax1, v_ax2])
                T_add_intermediate[v_ax0, v_ax1, v_ax2] = NT_matmul_intermediate[v_ax0, v_ax1, v_ax2] + transformer_h_0_attn_c_proj_bias3[v_ax2]
        for ax0, ax1, ax2 in T.grid(T.int64(1), seq_len, T.int64(1024)):
            with T.block("T_add_1"):
                v_ax0, v_ax1, v_ax2 = T.axis.remap("SSS", [ax0, ax1, ax2])
                T.reads(T_add_intermediate[v_ax0, v_ax1, v_ax2], add290[v_ax0, v_ax1, v_ax2])
                T.writes(T_add_intermediate_1_intermediate[v_ax0, v_ax1, v_ax2])
                T_add_intermediate_1_intermediate[v_ax0, v_ax1, v_ax2] = T_add_intermediate[v_ax0, v_ax1, v_ax2] + add290[v_ax0, v_ax1, v_ax2]
"""  # noqa: E501

# A softmax over rows of n, as relax's legalization prints one: a max reduction initialized to
# the dtype's lowest value, an exp-sum, and the division, with T.exp and T.max.
SOFTMAX = """
    @T.prim_func(private=True)
    def softmax(p_x: T.handle, p_out: T.handle):
        T.func_attr({"tir.noalias": T.bool(True)})
        n = T.int64()
        x = T.match_buffer(p_x, (n, T.int64(16)))
        out = T.match_buffer(p_out, (n, T.int64(16)))
        x_maxelem = T.alloc_buffer((n,))
        x_expsum = T.alloc_buffer((n,))
        for i0, k in T.grid(n, T.int64(16)):
            with T.block("x_maxelem"):
                v_i0, v_k = T.axis.remap("SR", [i0, k])
                with T.init():
                    x_maxelem[v_i0] = T.min_value("float32")
                x_maxelem[v_i0] = T.max(x_maxelem[v_i0], x[v_i0, v_k])
        for i0, k in T.grid(n, T.int64(16)):
            with T.block("x_expsum"):
                v_i0, v_k = T.axis.remap("SR", [i0, k])
                with T.init():
                    x_expsum[v_i0] = T.float32(0)
                x_expsum[v_i0] = x_expsum[v_i0] + T.exp(x[v_i0, v_k] - x_maxelem[v_i0])
        for i0, i1 in T.grid(n, T.int64(16)):
            with T.block("out"):
                v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
                out[v_i0, v_i1] = T.exp(x[v_i0, v_i1] - x_maxelem[v_i0]) / x_expsum[v_i0]
"""


def module(*functions: str) -> str:
    """An `@I.ir_module` class holding `functions` (each indented as the texts above)."""
    body = "".join(functions)
    return f"""# from tvm.script import ir as I
# from tvm.script import tir as T

@I.ir_module
class Module:{body}
    @R.function
    def main(x: R.Tensor(("n", 16), dtype="float32")):
        return x
"""
