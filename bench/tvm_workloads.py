"""TVM MetaSchedule on the CPU workloads of `bench/cpu_vs_tvm.py`: the reference tuner, run
beside tunehub on the same inputs.

    /path/to/tvm-venv/bin/python bench/tvm_workloads.py NAME TRIALS INPUTS.npz OUTPUTS.npz

Runs under a Python with `apache-tvm` 0.27 and `apache-tvm-ffi==0.1.14.post1` (0.1.15 crashes
in `tune_tir`), and xgboost, psutil, cloudpickle, which tunehub does not depend on:
`bench/cpu_vs_tvm.py --tvm-python PATH` calls it in a child process. Each
workload is written in TE the way tunehub's signature writes it (the int4 linear as MLC-LLM
lowers it: an unpack compute to float16, a dequantize compute, an NT matmul over a unit batch
axis accumulating in float16, two adds). It tunes with MetaSchedule's defaults for TRIALS
trials with kernels on one thread, runs the best kernel on the inputs the parent wrote
(`arg0`, `arg1`, ... in signature order), saves its output as `out`, and prints one JSON line:
tuned_s (median per call over repeats of at least 50 ms, tunehub's timer rule),
tuning_wall_s and the TVM version.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

# Kernels on one thread, as tunehub's rows; set before TVM starts its thread pool.
os.environ["TVM_NUM_THREADS"] = "1"

import tvm
from tvm import te
from tvm.s_tir import meta_schedule as ms


def matmul(n: int) -> list[te.Tensor]:
    a = te.placeholder((n, n), name="A", dtype="float32")
    b = te.placeholder((n, n), name="B", dtype="float32")
    k = te.reduce_axis((0, n), name="k")
    return [a, b, te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")]


def conv2d(n: int, c: int, hw: int, f: int) -> list[te.Tensor]:
    data = te.placeholder((n, c, hw, hw), name="data", dtype="float32")
    weight = te.placeholder((f, c, 3, 3), name="weight", dtype="float32")
    rc, ry, rx = (te.reduce_axis((0, e), name=s) for e, s in ((c, "c"), (3, "ry"), (3, "rx")))

    def point(b: te.Var, o: te.Var, y: te.Var, x: te.Var) -> te.Expr:
        inside = te.all(y + ry >= 1, y + ry <= hw, x + rx >= 1, x + rx <= hw)
        value = te.if_then_else(inside, data[b, rc, y + ry - 1, x + rx - 1], 0.0)
        return te.sum(value * weight[o, rc, ry, rx], axis=[rc, ry, rx])

    return [data, weight, te.compute((n, f, hw, hw), point, name="out")]


def softmax(m: int, n: int) -> list[te.Tensor]:
    x = te.placeholder((m, n), name="X", dtype="float32")
    k1, k2 = te.reduce_axis((0, n), name="k1"), te.reduce_axis((0, n), name="k2")
    row_max = te.compute((m,), lambda i: te.max(x[i, k1], axis=k1), name="row_max")
    row_sum = te.compute(
        (m,), lambda i: te.sum(te.exp(x[i, k2] - row_max[i]), axis=k2), name="row_sum"
    )
    y = te.compute((m, n), lambda i, j: te.exp(x[i, j] - row_max[i]) / row_sum[i], name="Y")
    return [x, y]


def layernorm(m: int, n: int) -> list[te.Tensor]:
    x = te.placeholder((m, n), name="X", dtype="float32")
    gamma = te.placeholder((n,), name="gamma", dtype="float32")
    beta = te.placeholder((n,), name="beta", dtype="float32")
    k1, k2 = te.reduce_axis((0, n), name="k1"), te.reduce_axis((0, n), name="k2")
    total = te.compute((m,), lambda i: te.sum(x[i, k1], axis=k1), name="row_sum")

    def deviation(i: te.Var, k: te.Var) -> te.Expr:
        return x[i, k] - total[i] / float(n)

    square = te.compute(
        (m,), lambda i: te.sum(deviation(i, k2) * deviation(i, k2), axis=k2), name="sq_dev"
    )
    y = te.compute(
        (m, n),
        lambda i, j: deviation(i, j) * te.rsqrt(square[i] / float(n) + 1e-5) * gamma[j] + beta[j],
        name="Y",
    )
    return [x, gamma, beta, y]


def rmsnorm(m: int, n: int) -> list[te.Tensor]:
    x = te.placeholder((m, n), name="X", dtype="float32")
    weight = te.placeholder((n,), name="weight", dtype="float32")
    k = te.reduce_axis((0, n), name="k")
    sum_sq = te.compute((m,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="sum_sq")
    y = te.compute(
        (m, n), lambda i, j: x[i, j] * te.rsqrt(sum_sq[i] / float(n) + 1e-6) * weight[j], name="Y"
    )
    return [x, weight, y]


def int4_mlc(seq: int, n: int, k_extent: int) -> list[te.Tensor]:
    """`fused_fused_dequantize1_fused_NT_matmul6_add7_add8` of MLC-LLM's GPT-2, block by
    block (with seq_len fixed: MetaSchedule tunes static shapes)."""
    w = te.placeholder((n, k_extent // 8), name="lv397", dtype="uint32")
    s = te.placeholder((n, k_extent // 32), name="lv398", dtype="float16")
    x = te.placeholder((1, seq, k_extent), name="reshape195", dtype="float16")
    bias = te.placeholder((n,), name="bias", dtype="float16")
    residual = te.placeholder((1, seq, n), name="add290", dtype="float16")
    unpacked = te.compute(
        (n, k_extent),
        lambda i, j: (w[i, j // 8] >> (j % 8 * 4).astype("uint32") & te.const(15, "uint32")).astype(
            "float16"
        ),
        name="compute",
    )
    dequantized = te.compute(
        (n, k_extent),
        lambda i, j: (unpacked[i, j] - te.const(7, "float16")) * s[i, j // 32],
        name="dequantize",
    )
    r = te.reduce_axis((0, k_extent), name="k")
    product = te.compute(
        (1, seq, n),
        lambda b, i, j: te.sum(x[b, i, r] * dequantized[j, r], axis=r),
        name="NT_matmul",
    )
    biased = te.compute((1, seq, n), lambda b, i, j: product[b, i, j] + bias[j], name="T_add")
    out = te.compute(
        (1, seq, n), lambda b, i, j: biased[b, i, j] + residual[b, i, j], name="T_add_1"
    )
    return [w, s, x, bias, residual, out]


WORKLOADS: dict[str, Callable[[], list[te.Tensor]]] = {
    "matmul_128": lambda: matmul(128),
    "matmul_512": lambda: matmul(512),
    "conv2d_2x16x14x14_f32": lambda: conv2d(2, 16, 14, 32),
    "softmax_64x1000": lambda: softmax(64, 1000),
    "layernorm_128x768": lambda: layernorm(128, 768),
    "rmsnorm_128x768": lambda: rmsnorm(128, 768),
    "int4_linear_mlc_seq32": lambda: int4_mlc(32, 1024, 1024),
    "int4_linear_mlc_seq32_v2": lambda: int4_mlc(32, 1024, 1024),  # one TE: TVM's own meaning
}


# MetaSchedule's default (30 s) kills builder processes still importing TVM (above), which
# then restart and import again: no candidate is ever built.
BUILD_TIMEOUT_S = 180


def host_target() -> tvm.target.Target:
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    return tvm.target.Target({"kind": "llvm", "mcpu": cpu, "num-cores": 1})


def median_latency(library: tvm.runtime.Executable, args: list[tvm.runtime.Tensor]) -> float:
    """Median seconds per call over 9 repeats of at least 50 ms each (tunehub's timer rule)."""
    timer = library.mod.time_evaluator("main", tvm.cpu(), number=1, repeat=1, min_repeat_ms=50)
    samples = sorted(timer(*args).mean for _ in range(9))
    return float(samples[len(samples) // 2])


def main() -> None:
    name, trials, inputs_path, outputs_path = sys.argv[1:5]
    tensors = WORKLOADS[name]()
    mod = tvm.IRModule({"main": te.create_prim_func(tensors)})
    target = host_target()
    # Registering TVM's tensor intrinsics takes about 40 s of import on some machines (every
    # TVMScript function it parses walks the interpreter stack): paid here before the clock,
    # and by each builder process at its start, which the builder's timeout must allow.
    importlib.import_module("tvm.s_tir.tensor_intrin")
    builder = ms.builder.LocalBuilder(timeout_sec=BUILD_TIMEOUT_S)
    with tempfile.TemporaryDirectory(prefix="tvm-ms-") as work_dir:
        start = time.perf_counter()
        database = ms.tune_tir(
            mod, target, work_dir, max_trials_global=int(trials), builder=builder
        )
        wall = time.perf_counter() - start
        schedule = ms.tir_integration.compile_tir(database, mod, target)
    if schedule is None:
        raise SystemExit(f"TVM found no valid schedule for {name} in {trials} trials")
    library = tvm.compile(schedule.mod, target=target)
    given = np.load(inputs_path)
    device = tvm.cpu()
    args = [tvm.runtime.tensor(given[f"arg{n}"], device) for n in range(len(tensors) - 1)]
    out = tensors[-1]
    shape = [int(e) for e in out.shape]
    args.append(tvm.runtime.tensor(np.zeros(shape, str(out.dtype)), device))
    library["main"](*args)
    np.savez(outputs_path, out=args[-1].numpy())
    tuned = median_latency(library, args)
    print(json.dumps({"tuned_s": tuned, "tuning_wall_s": wall, "tvm": tvm.__version__}))


if __name__ == "__main__":
    main()
