"""Whole models on the CPU against the tools users already have: coverage, then eager PyTorch,
`torch.compile` (default and max-autotune) and tunehub-optimized, side by side in one run on
the same threads.

    python bench/model_e2e.py                                  # block, gpt2, llama; 2 threads
    python bench/model_e2e.py --models gpt2 --trials 480 --threads 2
    python bench/model_e2e.py --models block,onnx --db-dir tuned/   # reuse earlier tunings

Models (random weights, nothing downloaded):
- `block`: the example GPT-2 block with int4 linears (`examples/models/gpt2_block.py`), seq 32;
- `gpt2`, `llama`: Hugging Face `transformers` configs (2 layers, hidden 512, 8 heads; Llama
  with 2 key/value heads; vocabulary 2048; eager attention), one sequence of 64 tokens,
  float32, wrapped to return the logits;
- `onnx`: the light ONNX zoo models the `onnx` wheel ships: their coverage (tunehub runs ONNX
  models through no runtime of its own, so they are not timed here) and onnxruntime's
  latency beside it.

For each torch model: its task set (`torch.export`, as `tunehub extract --torch` writes it),
`tunehub tune tasks.json --trials N --threads T` run as a user runs it into a database under
`--db-dir` (reused when it is there), `tunehub.torch.optimize`, then the four runs timed in
rounds that call each once, in turn (the order rotating), under `torch.no_grad` with
`torch.set_num_threads(T)` (the kernels share torch's OpenMP runtime, whose `libgomp.so.1`
they link, and its threads): the median per call of each, every ratio against the faster
`torch.compile`. The bar (issue 31): the optimized module within 1e-4 of eager's outputs and
at least 1.2x as fast as the faster `torch.compile`. The report goes to
docs/benchmarks/model_e2e-<date>-<commit>.md.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.machine import describe_machine, git_commit  # noqa: E402
from tunehub.frontends import onnx_model, torch_export  # noqa: E402
from tunehub.schemas.taskset import TaskSet  # noqa: E402
from tunehub.torch import optimize  # noqa: E402

BAR = 1.2  # the optimized module against the faster torch.compile
TOLERANCE = 1e-4
ZOO = (
    "resnet50", "inception_v1", "inception_v2", "densenet121", "shufflenet", "squeezenet",
    "vgg19", "bvlc_alexnet", "zfnet512",
)  # fmt: skip


@dataclass
class Model:
    """A torch model to time: the module, its example inputs, its dynamic shapes."""

    name: str
    module: torch.nn.Module
    inputs: tuple[Any, ...]
    dynamic: Any = None
    symbols: tuple[str, ...] = ()  # `--symbol` values the tuning measures


class Logits(torch.nn.Module):
    """A causal language model returning its logits alone."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids).logits


def make(name: str) -> Model:
    torch.manual_seed(0)
    if name == "block":
        from examples.models import gpt2_block

        block, _ = gpt2_block.make()
        inputs = gpt2_block.inputs(32)
        return Model(name, block.eval(), inputs, gpt2_block.dynamic_shapes(), ("seq=32",))
    import transformers

    if name == "gpt2":
        config: Any = transformers.GPT2Config(
            n_layer=2, n_embd=512, n_head=8, vocab_size=2048, n_positions=128,
            attn_implementation="eager",
        )  # fmt: skip
        model: Any = transformers.GPT2LMHeadModel(config)
    elif name == "llama":
        config = transformers.LlamaConfig(
            num_hidden_layers=2, hidden_size=512, num_attention_heads=8, num_key_value_heads=2,
            intermediate_size=1376, vocab_size=2048, max_position_embeddings=128,
            attn_implementation="eager",
        )  # fmt: skip
        model = transformers.LlamaForCausalLM(config)
    else:
        raise SystemExit(f"unknown model {name!r}: block, gpt2, llama or onnx")
    return Model(name, Logits(model.eval()).eval(), (torch.randint(0, 2048, (1, 64)),))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="block,gpt2,llama,onnx")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trials", type=int, default=480, help="each model's tuning budget")
    parser.add_argument("--seconds", type=float, default=20.0, help="timing per model")
    parser.add_argument("--db-dir", type=Path, help="where the tunings are kept (and reused)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="model_e2e-"))
    databases = args.db_dir or work
    databases.mkdir(parents=True, exist_ok=True)
    started = _load()
    sections: list[str] = []
    names = [n for n in args.models.split(",") if n]
    for name in names:
        if name == "onnx":
            sections += _onnx(args.threads)
            continue
        model = make(name)
        sections += _torch_model(model, databases / f"{name}.db", work, args)
    header = [
        f"# Whole models on the CPU ({datetime.date.today().isoformat()})",
        "",
        f"- Machine: {describe_machine()}",
        f"- Commit: {git_commit()}",
        f"- torch {torch.__version__}; {args.threads} thread(s) for torch, torch.compile and "
        "the kernels",
        f"- Command: `python bench/model_e2e.py --models {args.models} --threads "
        f"{args.threads} --trials {args.trials}`",
        f"- Load average (1, 5, 15 min): {started} at the start, {_load()} at the end.",
    ]
    text = "\n".join([*header, *sections]) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    commit = git_commit()
    path = args.out / f"model_e2e-{datetime.date.today().isoformat()}-{commit}.md"
    path.write_text(text)
    print(f"wrote {path}")


def _torch_model(model: Model, database: Path, work: Path, args: argparse.Namespace) -> list[str]:
    """Coverage, tuning, optimize, and the four runs timed side by side."""
    taskset = torch_export.export(model.module, model.inputs, model.dynamic)
    tasks = work / f"{model.name}.json"
    tasks.write_text(taskset.model_dump_json(indent=1))
    tuning = f"reused {database}"
    if not database.exists():
        tuning = _tune(tasks, database, model.symbols, args)
    fast = optimize(
        model.module,
        model.inputs,
        database,
        dynamic_shapes=model.dynamic,
        directory=work / f"{model.name}-kernels",
        verbose=False,
    )
    runs: dict[str, Callable[[], Any]] = {"eager": lambda: model.module(*model.inputs)}
    compiled = {
        "torch.compile": torch.compile(model.module),
        "torch.compile max-autotune": torch.compile(model.module, mode="max-autotune"),
    }
    with torch.no_grad():
        want = model.module(*model.inputs)
        errors = {"tunehub.torch": _error(fast(*model.inputs), want)}
        for label, module in compiled.items():
            start = time.perf_counter()
            errors[label] = _error(module(*model.inputs), want)  # compiles here
            print(f"{model.name}: {label} compiled in {time.perf_counter() - start:.0f} s")
            runs[label] = lambda module=module: module(*model.inputs)
        runs["tunehub.torch"] = lambda: fast(*model.inputs)
        medians = _time(runs, args.seconds)
    best_compile = min(medians["torch.compile"], medians["torch.compile max-autotune"])
    speedup = best_compile / medians["tunehub.torch"]
    passed = speedup >= BAR and errors["tunehub.torch"] <= TOLERANCE
    rows = [
        f"| {label} | {seconds * 1e3:.2f} ms | {best_compile / seconds:.2f}x | "
        f"{'-' if label == 'eager' else f'{errors[label]:.1e}'} |"
        for label, seconds in medians.items()
    ]
    tuned = len(fast.report.tuned)
    return [
        "",
        f"## {model.name}",
        "",
        f"Coverage: {len(taskset.tasks)} tasks, {taskset.flops.share:.1%} of "
        f"{taskset.flops.total / 1e6:.0f} MFLOP, {sum(e.count for e in taskset.left_out)} ops "
        f"left out ({', '.join(sorted({e.op for e in taskset.left_out})) or 'none'}), "
        f"{sum(e.count for e in taskset.no_kernel)} need no kernel (views, folded constants).",
        f"Tuning: {tuning}. Kernels taken: {tuned} of {len(fast.report.tasks)} task occurrences.",
        "",
        "| run | median per forward pass | speed vs the faster torch.compile | max abs "
        "difference from eager |",
        "|---|---|---|---|",
        *rows,
        "",
        f"Bar (within {TOLERANCE:g} of eager and >= {BAR}x the faster torch.compile): "
        f"{'met' if passed else 'NOT met'} ({speedup:.2f}x).",
        "",
        "```",
        str(fast.report),
        "```",
    ]


def _onnx(threads: int) -> list[str]:
    """The light zoo models' coverage, and onnxruntime's latency on their declared inputs."""
    import numpy as np
    import onnx
    import onnxruntime

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    rows = []
    for name in ZOO:
        path = light / f"light_{name}.onnx"
        taskset: TaskSet = onnx_model.read(path)
        left = sorted({e.op for e in taskset.left_out})
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        session = onnxruntime.InferenceSession(str(path), options)
        feed = {
            i.name: np.random.default_rng(0).standard_normal(
                [d if isinstance(d, int) else 1 for d in i.shape], np.float32
            )
            for i in session.get_inputs()
        }
        ort = _time({"ort": lambda s=session, f=feed: s.run(None, f)}, 3.0)["ort"]
        rows.append(
            f"| {name} | {len(taskset.tasks)} | {taskset.flops.share:.1%} | "
            f"{', '.join(left) or 'none'} | {ort * 1e3:.1f} ms |"
        )
    return [
        "",
        "## ONNX zoo (light models of the onnx wheel)",
        "",
        "tunehub has no ONNX runtime of its own: coverage here, and onnxruntime's latency (its",
        "CPU provider, same threads) for scale.",
        "",
        "| model | tasks | FLOPs in tasks | left out | onnxruntime |",
        "|---|---|---|---|---|",
        *rows,
    ]


def _tune(tasks: Path, database: Path, symbols: tuple[str, ...], args: argparse.Namespace) -> str:
    """Tune the task set with the `tunehub tune` command; a line saying what it took."""
    command = [
        sys.executable, "-c", "from tunehub.client.cli import main; main()", "tune", str(tasks),
        "--db", f"sqlite:///{database}", "--trials", str(args.trials),
        "--threads", str(args.threads), "--json",
        *(arg for symbol in symbols for arg in ("--symbol", symbol)),
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"tuning failed: {done.stderr.strip()}")
    summary = json.loads(done.stdout)
    seconds = time.perf_counter() - start
    return f"{args.trials} trials on {len(summary['tasks'])} tasks in {seconds:.0f} s"


def _time(runs: dict[str, Callable[[], Any]], seconds: float) -> dict[str, float]:
    """The median seconds per call of each run, timed in rounds that call each once, the
    order rotating from round to round, for `seconds` in all (at least 9 rounds)."""
    for run in runs.values():
        run()
    times: dict[str, list[float]] = {label: [] for label in runs}
    labels = list(runs)
    began, rounds = time.perf_counter(), 0
    while rounds < 9 or time.perf_counter() - began < seconds:
        for label in labels[rounds % len(labels) :] + labels[: rounds % len(labels)]:
            start = time.perf_counter()
            runs[label]()
            times[label].append(time.perf_counter() - start)
        rounds += 1
    return {label: statistics.median(values) for label, values in times.items()}


def _error(got: torch.Tensor, want: torch.Tensor) -> float:
    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf")
    return float((got.float() - want.float()).abs().max())


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
