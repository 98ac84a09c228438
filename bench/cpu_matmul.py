"""fp32 matmul on the CPU: naive schedule vs tuned kernel vs numpy, side by side in one run.

    python bench/cpu_matmul.py                    # N = 128, 512 (1 thread), 1024 (2 threads)
    python bench/cpu_matmul.py --sizes 128 --trials 32
    python bench/cpu_matmul.py --sizes 128 512 --tvm-python /path/to/tvm-venv/bin/python

Each size is tuned from scratch (a fresh SQLite database) through the real tuner and local
executor, with the default search strategy unless `--strategy` names another; naive and tuned
latencies are the tuner's own measurements (median of repeats). With `--tvm-python`, TVM
MetaSchedule tunes the same matmul with the same trial budget in a child process under that
Python (`bench/tvm_matmul.py`: kernels on one thread, timed by the same rule), so the
reference tuner and tunehub are compared on one machine in one run.
numpy runs in a child process with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, so OpenBLAS
picks its kernels for this CPU, and with the same number of threads; the table says which
BLAS kernels it ran. Results go to docs/benchmarks/cpu_matmul-<date>.md (with TVM,
cpu_matmul_vs_tvm-<date>.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine import describe_machine, git_commit  # noqa: E402
from bench.tuning import scratch_database, tune  # noqa: E402
from tunehub.schemas import TaskSignature  # noqa: E402
from tunehub.schemas.api import DEFAULT_STRATEGY  # noqa: E402
from tunehub.schemas.target import Target  # noqa: E402
from tunehub.server.tuner import LocalExecutor  # noqa: E402

DEFAULT_THREADS = {128: 1, 512: 1, 1024: 2}

# Times numpy's matmul the way the tuner times kernels: median per call over repeats of
# batches that last at least 50 ms. Prints one JSON line.
NUMPY_TIMER = """
import json, sys, time
import numpy as np
n = int(sys.argv[1])
rng = np.random.default_rng(0)
a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
out = np.empty((n, n), np.float32)
np.matmul(a, b, out=out)
calls = 1
while True:
    start = time.perf_counter()
    for _ in range(calls):
        np.matmul(a, b, out=out)
    if time.perf_counter() - start > 0.05:
        break
    calls *= 2
samples = []
for _ in range(9):
    start = time.perf_counter()
    for _ in range(calls):
        np.matmul(a, b, out=out)
    samples.append((time.perf_counter() - start) / calls)
samples.sort()
try:
    from threadpoolctl import threadpool_info
    blas = ", ".join(
        f"{p['internal_api']} {p.get('version')} {p.get('architecture')} x{p['num_threads']}"
        for p in threadpool_info() if p["user_api"] == "blas"
    )
except ImportError:
    blas = "unknown (threadpoolctl missing)"
print(json.dumps({"latency_s": samples[len(samples) // 2], "blas": blas}))
"""


@dataclass
class Row:
    n: int
    threads: int
    trials: int
    naive_s: float
    tuned_s: float
    numpy_s: float
    tuning_wall_s: float
    blas: str
    tvm: dict[str, float] | None = None

    def gflops(self, seconds: float) -> float:
        return 2 * self.n**3 / seconds / 1e9


def tune_matmul(
    n: int, trials: int, threads: int, seed: int, strategy: str
) -> tuple[float, float, float]:
    """(naive latency, tuned latency, tuning wall time) of a fresh tuning of matmul n^3."""
    signature = TaskSignature.model_validate_json(
        (ROOT / "examples" / f"matmul_{n}.json").read_text()
    )
    with tempfile.TemporaryDirectory(prefix="tunehub-bench-") as tmp:
        sessions = scratch_database(Path(tmp))
        with LocalExecutor() as executor:
            target = executor.resolve(Target(kind="cpu"))
            summary, wall = tune(
                sessions,
                executor,
                signature,
                target,
                trials=trials,
                strategy=strategy,
                threads=threads,
                seed=seed,
            )
    if summary.best is None or summary.baseline_latency_s is None:
        raise SystemExit(f"matmul {n}: tuning found no verified kernel ({summary.failures})")
    return summary.baseline_latency_s, summary.best.latency_s, wall


def time_numpy(n: int, threads: int) -> tuple[float, str]:
    unset = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    done = subprocess.run(
        [sys.executable, "-c", NUMPY_TIMER, str(n)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout)
    return result["latency_s"], result["blas"]


def tune_tvm(python: Path, n: int, trials: int) -> dict[str, float]:
    """TVM MetaSchedule's naive and tuned latency and tuning time, from bench/tvm_matmul.py."""
    done = subprocess.run(
        [str(python), str(ROOT / "bench" / "tvm_matmul.py"), str(n), str(trials)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"TVM matmul {n} failed:\n{done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def table(rows: list[Row]) -> str:
    lines = [
        "| N | threads | naive | tuned | numpy | tuned / numpy | speedup vs naive | trials "
        "| tuning wall time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.n} | {r.threads} | {r.naive_s * 1e3:.3f} ms ({r.gflops(r.naive_s):.1f} GFLOP/s) "
            f"| {r.tuned_s * 1e3:.4f} ms ({r.gflops(r.tuned_s):.0f} GFLOP/s) "
            f"| {r.numpy_s * 1e3:.4f} ms ({r.gflops(r.numpy_s):.0f} GFLOP/s) "
            f"| {r.numpy_s / r.tuned_s:.2f} | {r.naive_s / r.tuned_s:.0f}x | {r.trials} "
            f"| {r.tuning_wall_s:.0f} s |"
        )
    return "\n".join(lines)


def tvm_table(rows: list[Row]) -> str:
    """tunehub beside TVM MetaSchedule: same matmul, trial budget, threads and timer rule."""
    lines = [
        "| N | threads | trials | tunehub tuned | tunehub tuning | TVM naive | TVM tuned "
        "| TVM tuning | TVM latency / tunehub's | tunehub tuning time / TVM's |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.tvm is None:
            continue
        tvm_naive, tvm_tuned, tvm_wall = r.tvm["naive_s"], r.tvm["tuned_s"], r.tvm["tuning_wall_s"]
        lines.append(
            f"| {r.n} | {r.threads} | {r.trials} "
            f"| {r.tuned_s * 1e3:.4f} ms ({r.gflops(r.tuned_s):.0f} GFLOP/s) "
            f"| {r.tuning_wall_s:.0f} s | {tvm_naive * 1e3:.3f} ms "
            f"| {tvm_tuned * 1e3:.4f} ms ({r.gflops(tvm_tuned):.0f} GFLOP/s) | {tvm_wall:.0f} s "
            f"| {tvm_tuned / r.tuned_s:.2f} | {r.tuning_wall_s / tvm_wall:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 512, 1024])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--threads", type=int, help="for every size (default: 1, 1, 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strategy", default=DEFAULT_STRATEGY)
    parser.add_argument(
        "--tvm-python", type=Path, help="a Python with apache-tvm: tune with TVM side by side"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    args = parser.parse_args()

    rows = []
    for n in args.sizes:
        threads = args.threads or DEFAULT_THREADS.get(n, 1)
        naive, tuned, wall = tune_matmul(n, args.trials, threads, args.seed, args.strategy)
        numpy_s, blas = time_numpy(n, threads)
        tvm = tune_tvm(args.tvm_python, n, args.trials) if args.tvm_python else None
        rows.append(Row(n, threads, args.trials, naive, tuned, numpy_s, wall, blas, tvm))
        print(table(rows[-1:]), flush=True)

    today = datetime.date.today().isoformat()
    report = "\n".join(
        [
            f"# CPU fp32 matmul: naive vs tuned vs numpy ({today})",
            "",
            f"- machine: {describe_machine()}",
            f"- commit: {git_commit()}",
            f"- command: `python bench/cpu_matmul.py {' '.join(sys.argv[1:])}`".rstrip(),
            f"- numpy BLAS: {'; '.join(sorted({r.blas for r in rows}))}",
            "- naive and tuned: the tuner's measurements (median of repeats); numpy: median in a",
            "  child process, OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset, same thread count.",
            "",
            table(rows),
            "",
        ]
    )
    if any(r.tvm is not None for r in rows):
        tvm_version = next(r.tvm["tvm"] for r in rows if r.tvm is not None)
        report += "\n".join(
            [
                "",
                f"## Beside TVM MetaSchedule {tvm_version} (same machine, same run)",
                "",
                "TVM: `bench/tvm_matmul.py` (MetaSchedule defaults, builds on every core, kernels",
                "on one thread). TVM latency / tunehub's above 1: tunehub's kernel is faster;",
                "tunehub tuning time / TVM's under 1: tunehub tuned faster (0.5 = half the time).",
                "",
                tvm_table(rows),
                "",
            ]
        )
    print()
    print(table(rows))
    if any(r.tvm is not None for r in rows):
        print(tvm_table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    # A run beside TVM is its own report: it does not replace the plain table of the day.
    name = "cpu_matmul_vs_tvm" if args.tvm_python else "cpu_matmul"
    path = args.out / f"{name}-{today}.md"
    path.write_text(report)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
