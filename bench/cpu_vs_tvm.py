"""tunehub beside TVM MetaSchedule on the CPU, side by side in one run: same workloads, same
trial budget, one thread each, same inputs.

    python bench/cpu_vs_tvm.py --tvm-python /path/to/tvm-venv/bin/python
    python bench/cpu_vs_tvm.py --tvm-python PY --trials 64 --only matmul_128 softmax_64x1000

The workloads are the signatures in `bench/data/vs_tvm/` (matmul 128^3 and 512^3, a 3x3
conv2d, softmax, layernorm, rmsnorm, and the int4 weight-only linear written as MLC-LLM lowers
it, at seq_len 32, in both signature versions: `_v2` is what `frontends/tir.py` writes for
MLC's TIR, products unrounded, the float32 sum rounded once); `bench/tvm_workloads.py` writes
each in TE for TVM (see its doc for the Python it needs; both int4 rows are one TE, computed
as TVM computes it). Each is tuned from scratch: tunehub through the real tuner and local
executor on a fresh database, TVM with `tune_tir` in a child process. Both best kernels are
timed by one rule (the median of 9 batches of at least 50 ms) and run on the same random
inputs; TVM's output is checked against tunehub's reference evaluator (TVM accumulates the
int4 linear in float16 as the TIR says, so its error there is larger: the version 1 row
rounds every product, the nearer to TVM's float16 arithmetic, and is the one earlier reports
measured). Beside them: numpy's time on one thread (`worker.measure.library`) and, for a row
program, its copy floor (its first input copied to its output, `copy_floor`).

Prints a table and writes `docs/benchmarks/cpu_vs_tvm-<date>-<isa>.md` with the machine (CPU model
and ISA) and commit: per workload both latencies, tunehub's speed relative to TVM, both
tuning times, and the geometric mean; each row program's two kernels against its copy floor.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine import write_cpu_report  # noqa: E402
from bench.tuning import Tuned, median_latency, scratch_database, tune, tune_cpu  # noqa: E402
from tunehub.compiler.analysis import analyze  # noqa: E402
from tunehub.compiler.inputs import random_inputs  # noqa: E402
from tunehub.compiler.program import load  # noqa: E402
from tunehub.compiler.reference import evaluate  # noqa: E402
from tunehub.compiler.verify import compare, reduce_extent  # noqa: E402
from tunehub.schemas import TaskSignature  # noqa: E402
from tunehub.schemas.target import Target  # noqa: E402
from tunehub.server.tuner import LocalExecutor  # noqa: E402
from tunehub.worker.measure.library import library_latency  # noqa: E402

WORKLOADS = ROOT / "bench" / "data" / "vs_tvm"
SYMBOLS = {"int4_linear_mlc_seq32": {"seq_len": 32}, "int4_linear_mlc_seq32_v2": {"seq_len": 32}}
ORDER = (
    "matmul_128",
    "matmul_512",
    "conv2d_2x16x14x14_f32",
    "softmax_64x1000",
    "layernorm_128x768",
    "rmsnorm_128x768",
    "int4_linear_mlc_seq32",
    "int4_linear_mlc_seq32_v2",
)
FLOOR_TRIALS = 16


@dataclass
class Row:
    name: str
    tunehub_s: float
    tunehub_tuning_s: float
    tvm_s: float
    tvm_tuning_s: float
    tvm_error: str
    numpy_s: float
    floor_s: float | None

    @property
    def speed(self) -> float:
        """tunehub's speed relative to TVM's (above 1: tunehub's kernel is faster)."""
        return self.tvm_s / self.tunehub_s


def run_workload(name: str, trials: int, tvm_python: Path, seed: int) -> Row:
    document = (WORKLOADS / f"{name}.json").read_text()
    program, symbols = load(document), SYMBOLS.get(name, {})
    inputs = random_inputs(program, symbols, seed=0)
    with tempfile.TemporaryDirectory(prefix="tunehub-vs-tvm-") as tmp:
        sessions = scratch_database(Path(tmp))
        with LocalExecutor() as executor:
            target = executor.resolve(Target(kind="cpu"))
            summary, wall = tune(
                sessions,
                executor,
                TaskSignature.model_validate_json(document),
                target,
                trials=trials,
                symbols=symbols,
                threads=1,
                seed=seed,
            )
        if summary.best is None:
            raise SystemExit(f"{name}: tunehub found no verified kernel ({summary.failures})")
        best = Tuned(
            TaskSignature.model_validate_json(document),
            symbols,
            dict(summary.best.config),
            summary.best.latency_s,
        )
        given, produced = Path(tmp, "inputs.npz"), Path(tmp, "outputs.npz")
        np.savez(given, **{f"arg{n}": inputs[t.name] for n, t in enumerate(program.inputs)})
        command = [str(tvm_python), str(ROOT / "bench" / "tvm_workloads.py"), name, str(trials)]
        done = subprocess.run([*command, str(given), str(produced)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{name}: TVM failed\n{done.stderr[-3000:]}")
        tvm = json.loads(done.stdout.strip().splitlines()[-1])
        output = program.outputs[0]
        expected = evaluate(program, inputs, symbols)[output]
        actual = np.load(produced)["out"]
        terms = reduce_extent(program, output, symbols)
        checked = compare(expected, actual, program.buffer(output).dtype, reduce_extent=terms)
    error = "ok" if checked.ok else f"off: max abs error {checked.max_abs_err:.3g}"
    return Row(
        name,
        median_latency(best),
        wall,
        tvm["tuned_s"],
        tvm["tuning_wall_s"],
        error,
        library_latency(program, symbols, threads=1),
        copy_floor(json.loads(document)) if analyze(program).groups else None,
    )


def copy_floor(document: dict[str, Any]) -> float | None:
    """What moving a row program's bytes costs: its first input copied to an output of the
    same shape and dtype, tuned by tunehub and timed by the same rule. A row kernel cannot
    run much faster than this, so it says how much room a bar relative to TVM leaves. None
    where the output is not the first input's shape and dtype."""
    source = document["inputs"][0]
    (output,) = (c for c in document["computes"] if c["name"] == document["outputs"][0])
    if output["shape"] != source["shape"] or output["dtype"] != source["dtype"]:
        return None
    axes = [f"i{n}" for n in range(len(source["shape"]))]
    copy = {
        "version": 1,
        "name": f"{document['name']}_copy",
        "inputs": [source],
        "computes": [
            {
                "name": "Y",
                "axes": axes,
                "shape": source["shape"],
                "dtype": source["dtype"],
                "expr": f"{source['name']}[{', '.join(axes)}]",
            }
        ],
        "outputs": ["Y"],
    }
    return median_latency(tune_cpu(copy, FLOOR_TRIALS))


def report(rows: list[Row], trials: int) -> str:
    lines = [
        "| workload | TVM | tunehub | tunehub speed vs TVM | numpy | TVM tuning | tunehub tuning "
        "| tuning time vs TVM | TVM output | copy floor |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.tvm_s * 1e3:.4f} ms | {r.tunehub_s * 1e3:.4f} ms | "
            f"{r.speed:.2f}x | {r.numpy_s * 1e3:.4f} ms | {r.tvm_tuning_s:.0f} s | "
            f"{r.tunehub_tuning_s:.0f} s | {r.tunehub_tuning_s / r.tvm_tuning_s:.2f}x | "
            f"{r.tvm_error} | {_floor(r)} |"
        )
    speed = math.exp(sum(math.log(r.speed) for r in rows) / len(rows))
    tuning = sum(r.tunehub_tuning_s for r in rows) / sum(r.tvm_tuning_s for r in rows)
    worst = min(rows, key=lambda r: r.speed)
    lines += [
        "",
        f"Geometric mean of tunehub's speed relative to TVM: **{speed:.2f}x** over {len(rows)} "
        f"workloads (slowest: {worst.name}, {worst.speed:.2f}x); tunehub's total tuning time "
        f"is {tuning:.2f}x TVM's. {trials} trials each, kernels on one thread.",
    ]
    floored = [(r, r.floor_s) for r in rows if r.floor_s is not None]
    if floored:
        lines += [
            "",
            "Against the copy floor (the first input copied to the output, tuned by tunehub "
            f"with {FLOOR_TRIALS} trials, same timer): "
            + "; ".join(
                f"{r.name} tunehub {r.tunehub_s / floor:.2f}x, TVM {r.tvm_s / floor:.2f}x"
                for r, floor in floored
            )
            + ".",
        ]
    return "\n".join(lines)


def _floor(row: Row) -> str:
    return "" if row.floor_s is None else f"{row.floor_s * 1e3:.4f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tvm-python", type=Path, required=True)
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="+", choices=ORDER)
    args = parser.parse_args()
    rows = []
    for name in args.only or ORDER:
        rows.append(run_workload(name, args.trials, args.tvm_python, args.seed))
        print(
            f"{name}: tunehub {rows[-1].tunehub_s * 1e3:.4f} ms, TVM {rows[-1].tvm_s * 1e3:.4f} "
            f"ms ({rows[-1].speed:.2f}x)",
            flush=True,
        )
    table = report(rows, args.trials)
    print(table)
    write_cpu_report(
        "cpu_vs_tvm",
        "CPU kernels beside TVM MetaSchedule",
        f"python bench/cpu_vs_tvm.py --trials {args.trials}",
        "TVM 0.27 MetaSchedule in the same run, one thread each, same inputs",
        args.only,
        table + "\n",
    )


if __name__ == "__main__":
    main()
