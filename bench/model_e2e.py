"""The example GPT-2 block (`examples/models/gpt2_block.py`) end to end on the CPU: extracted
by each frontend, tuned by the local tuner, optimized with `tunehub.torch`, then eager vs
optimized latency on the same threads.

    python bench/model_e2e.py                      # tune 320 trials at seq=32, 2 threads
    python bench/model_e2e.py --trials 640 --threads 4 --seq 32
    python bench/model_e2e.py --db tuned.db        # time kernels tuned earlier, no tuning

1. Coverage: the block's task set from PyTorch (`torch.export`), from its ONNX export and from
   its TIR form (`gpt2_block.tvmscript`): tasks, share of FLOPs, ops left out, and how many of
   its workloads are PyTorch's.
2. Tuning: `tunehub tune tasks.json --symbol seq=SEQ --trials N --threads T`, run as a user
   runs it, into a fresh SQLite database: every task on one budget, weighted as the set says.
3. `tunehub.torch.optimize(block, inputs, database)`: each task whose kernel is verified and
   faster than its ops on this machine runs the kernel.
4. Latency: eager and optimized forward passes under `torch.no_grad`, alternated in rounds
   of 3 calls each (a loaded machine slows both alike), torch and the kernels on T threads
   (`torch.set_num_threads` and threadpoolctl: the kernels share torch's OpenMP runtime, as
   torch's bundled libgomp is the `libgomp.so.1` they link); the median per call of each,
   and the speedup as the median (and the quartiles) of the rounds' ratios.

The bar (issue 15): the optimized block at least 1.5x as fast as eager with every int4
linear on a tuned kernel. Results go to docs/benchmarks/model_e2e-<date>.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from bench.machine import describe_machine, git_commit  # noqa: E402
from examples.models import gpt2_block  # noqa: E402
from tunehub.compiler.canonical import workload_key  # noqa: E402
from tunehub.compiler.program import load  # noqa: E402
from tunehub.frontends import onnx_model, tir, torch_export  # noqa: E402
from tunehub.schemas.signature import SymbolDecl  # noqa: E402
from tunehub.schemas.taskset import TaskSet  # noqa: E402
from tunehub.torch import optimize  # noqa: E402

BAR = 1.5
SEQ_RANGE = {"seq": SymbolDecl(min=1, max=1024)}  # the torch Dim's range


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=32, help="tokens in the timed forward pass")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--trials", type=int, default=320, help="the task set's budget")
    parser.add_argument("--rounds", type=int, default=40, help="timing rounds")
    parser.add_argument("--db", type=Path, help="a database tuned already: skip tuning")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--tag", help="a suffix of the report's name: model_e2e-DATE-TAG.md")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = _load()
    work = Path(tempfile.mkdtemp(prefix="model_e2e-"))
    block, _ = gpt2_block.make()
    inputs = gpt2_block.inputs(args.seq)
    from_torch = torch_export.export(block, inputs, gpt2_block.dynamic_shapes())
    coverage = _coverage(from_torch, block, work)
    tasks = work / "tasks.json"
    tasks.write_text(from_torch.model_dump_json(indent=1))
    tuning = "none: --db given"
    database = args.db
    if database is None:
        database = work / "tuned.db"
        tuning = _tune(tasks, database, args)
    fast = optimize(
        block,
        inputs,
        database,
        dynamic_shapes=gpt2_block.dynamic_shapes(),
        directory=work / "kernels",
        verbose=False,
    )
    print(fast.report)
    with torch.no_grad(), threadpool_limits(limits=args.threads, user_api="openmp"):
        error = (fast(*inputs) - block(*inputs)).abs().max().item()
        torch.testing.assert_close(fast(*inputs), block(*inputs), rtol=1e-3, atol=1e-3)
        eager, optimized = _time(block, fast, inputs, args.rounds)
    int4 = [t for t in fast.report.tasks if any("rshift" in op for op in t.source_ops)]
    on_kernels = sum(t.tuned for t in int4)
    ratios = statistics.quantiles([e / f for e, f in zip(eager, optimized, strict=True)], n=4)
    passed = ratios[1] >= BAR and on_kernels == len(int4)
    latency = (statistics.median(eager), statistics.median(optimized), ratios)
    lines = _report(args, coverage, tuning, fast, latency, error, (on_kernels, len(int4)), passed)
    lines += ["", f"Load average (1, 5, 15 min): {started} at the start, {_load()} at the end."]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    tag = f"-{args.tag}" if args.tag else ""
    path = args.out / f"model_e2e-{datetime.date.today().isoformat()}{tag}.md"
    path.write_text(text)
    print(f"wrote {path}")


def _coverage(from_torch: TaskSet, block: torch.nn.Module, work: Path) -> list[tuple]:
    """(frontend, tasks, FLOPs share, ops left out, workloads shared with PyTorch's)."""
    path = gpt2_block.save_onnx(work / "gpt2_block.onnx", block)  # type: ignore[arg-type]
    tir_text = Path(gpt2_block.__file__).with_name("gpt2_block.tvmscript").read_text()
    sets = {
        "PyTorch (torch.export)": from_torch,
        "ONNX (MatMulNBits)": onnx_model.read(path, SEQ_RANGE),
        "TVM TIR (gpt2_block.tvmscript)": tir.read(tir_text, "gpt2_block.tvmscript", SEQ_RANGE),
    }
    reference = _keys(from_torch)
    return [
        (
            name,
            len(taskset.tasks),
            taskset.flops.share,
            sum(entry.count for entry in taskset.left_out),
            len(_keys(taskset) & reference),
        )
        for name, taskset in sets.items()
    ]


def _keys(taskset: TaskSet) -> set[str]:
    return {workload_key(load(task.signature)) for task in taskset.tasks}


def _tune(tasks: Path, database: Path, args: argparse.Namespace) -> str:
    """Tune the task set with the `tunehub tune` command; a line saying what it took."""
    command = [
        sys.executable,
        "-c",
        "from tunehub.client.cli import main; main()",
        "tune",
        str(tasks),
        "--db",
        f"sqlite:///{database}",
        "--trials",
        str(args.trials),
        "--symbol",
        f"seq={args.seq}",
        "--threads",
        str(args.threads),
        "--json",
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"tuning failed: {done.stderr.strip()}")
    summary = json.loads(done.stdout)
    seconds = time.perf_counter() - start
    return f"{args.trials} trials on {len(summary['tasks'])} tasks in {seconds:.0f} s"


def _time(
    eager: torch.nn.Module, fast: torch.nn.Module, inputs: tuple, rounds: int
) -> tuple[list[float], list[float]]:
    """Seconds per call of each in every round, a round being 3 calls of each in turn."""
    times: tuple[list[float], list[float]] = ([], [])
    for module in (eager, fast):
        module(*inputs)
    for _ in range(rounds):
        for measured, module in zip(times, (eager, fast), strict=True):
            start = time.perf_counter()
            for _ in range(3):
                module(*inputs)
            measured.append((time.perf_counter() - start) / 3)
    return times


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _report(
    args: argparse.Namespace,
    coverage: list[tuple],
    tuning: str,
    fast: torch.nn.Module,
    latency: tuple[float, float, list[float]],
    error: float,
    int4: tuple[int, int],
    passed: bool,
) -> list[str]:
    report = fast.report  # type: ignore[attr-defined]
    eager_s, fast_s, (low, speedup, high) = latency
    verdict = "met" if passed else "NOT met"
    lines = [
        f"# The example GPT-2 block end to end on the CPU ({datetime.date.today().isoformat()})",
        "",
        f"- Machine: {describe_machine()}",
        f"- Commit: {git_commit()}",
        f"- torch {torch.__version__}; {args.threads} thread(s) for torch and for the kernels;"
        f" seq = {args.seq}",
        f"- Tuning: {tuning} (`tunehub tune`, local tuner, at seq={args.seq})",
        f"- Command: `python bench/model_e2e.py --seq {args.seq} --threads {args.threads}"
        f" --trials {args.trials}`",
        "",
        "## Coverage of each frontend",
        "",
        "| frontend | tasks | FLOPs covered | ops left out | workloads shared with PyTorch's |",
        "|---|---|---|---|---|",
        *(f"| {n} | {t} | {s:.1%} | {lo} | {sh} |" for n, t, s, lo, sh in coverage),
        "",
        "## Latency",
        "",
        "| | per forward pass |",
        "|---|---|",
        f"| eager PyTorch | {eager_s * 1e3:.2f} ms |",
        f"| tunehub.torch | {fast_s * 1e3:.2f} ms |",
        f"| speedup (median of {args.rounds} rounds' ratios; quartiles) | {speedup:.2f}x"
        f" ({low:.2f}x to {high:.2f}x) |",
        "",
        f"Largest difference from eager: {error:.2e}. int4 linears on tuned kernels: "
        f"{int4[0]}/{int4[1]}. Bar (>= {BAR}x, every int4 linear tuned): {verdict}.",
        "",
        "## What runs where (`optimize`'s report)",
        "",
        "```",
        str(report),
        "```",
    ]
    return lines


if __name__ == "__main__":
    main()
