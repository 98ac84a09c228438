"""TVM MetaSchedule's fp32 matmul on this machine: the reference tuner, run beside tunehub.

    python3 -m venv /tmp/tvm && /tmp/tvm/bin/pip install apache-tvm==0.27.0.post1 \
        apache-tvm-ffi==0.1.14.post0 xgboost-cpu psutil cloudpickle
    /tmp/tvm/bin/python bench/tvm_matmul.py N TRIALS

Runs under a Python that has `apache-tvm` (0.27) and `xgboost`, which tunehub itself does not
depend on; `bench/cpu_matmul.py --tvm-python PATH` calls it in a child process so both tuners
are measured in one run on the same machine. It tunes `C = A @ B` (N^3, fp32) with
MetaSchedule's defaults (evolutionary search, XGBoost cost model, 64 candidates per batch,
builds on every physical core) for TRIALS trials with kernels on one thread, then times the
naive loop nest and the best kernel the way tunehub's timer does (median over repeats of
batches lasting at least 50 ms) and prints one JSON line: naive_s, tuned_s, tuning_wall_s and
the TVM version. Tested with apache-tvm 0.27.0.post1 and apache-tvm-ffi 0.1.14.post0 (0.1.15
crashes in its JSON serializer when MetaSchedule starts).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import numpy as np

# Kernels on one thread, as tunehub's one-core rows; set before TVM starts its thread pool.
os.environ["TVM_NUM_THREADS"] = "1"

import tvm
from tvm import te
from tvm.s_tir import meta_schedule as ms


def matmul(n: int) -> tvm.IRModule:
    a = te.placeholder((n, n), name="A", dtype="float32")
    b = te.placeholder((n, n), name="B", dtype="float32")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def host_target() -> tvm.target.Target:
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    return tvm.target.Target({"kind": "llvm", "mcpu": cpu, "num-cores": 1})


def median_latency(library: tvm.runtime.Executable, n: int) -> float:
    """Median seconds per call over 9 repeats of at least 50 ms each (tunehub's timer rule)."""
    device = tvm.cpu()
    rng = np.random.default_rng(0)
    a = tvm.runtime.tensor(rng.uniform(-1, 1, (n, n)).astype(np.float32), device)
    b = tvm.runtime.tensor(rng.uniform(-1, 1, (n, n)).astype(np.float32), device)
    c = tvm.runtime.tensor(np.zeros((n, n), np.float32), device)
    library["main"](a, b, c)
    np.testing.assert_allclose(c.numpy(), a.numpy() @ b.numpy(), rtol=1e-3, atol=1e-3)
    timer = library.mod.time_evaluator("main", device, number=1, repeat=1, min_repeat_ms=50)
    samples = sorted(timer(a, b, c).mean for _ in range(9))
    return float(samples[len(samples) // 2])


def main() -> None:
    n, trials = int(sys.argv[1]), int(sys.argv[2])
    mod, target = matmul(n), host_target()
    naive = median_latency(tvm.compile(mod, target=target), n)
    with tempfile.TemporaryDirectory(prefix="tvm-ms-") as work_dir:
        start = time.perf_counter()
        database = ms.tune_tir(mod, target, work_dir, max_trials_global=trials)
        wall = time.perf_counter() - start
        schedule = ms.tir_integration.compile_tir(database, mod, target)
    if schedule is None:
        raise SystemExit(f"TVM found no valid schedule for matmul {n} in {trials} trials")
    tuned = median_latency(tvm.compile(schedule.mod, target=target), n)
    print(
        json.dumps(
            {"naive_s": naive, "tuned_s": tuned, "tuning_wall_s": wall, "tvm": tvm.__version__}
        )
    )


if __name__ == "__main__":
    main()
