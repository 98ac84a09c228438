"""`tunehub demo`: the service's whole round trip on this machine, as a user of it would go.

With a started stack (`server.standalone`): submit a signature over HTTP through the SDK,
follow the tuning with a progress bar, compare the best kernel with the naive schedule (the
tuner's baseline), download the best kernel's artifact, load it with `load_kernel`, run it on
fresh random inputs and check its output against the numpy reference evaluator.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.table import Table

from tunehub.client.commands.common import UserError, read_signature, seconds
from tunehub.client.commands.common import console as uncut_console
from tunehub.client.commands.summaries import progress_bar
from tunehub.client.sdk import Client
from tunehub.runtime import load_kernel
from tunehub.runtime.backend import target_runtime
from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.target import Target

if TYPE_CHECKING:
    from tunehub.server.standalone import Stack

# Inputs the kernel never saw during tuning (the tuner's are seeded per workload from 0).
CHECK_SEED = 2024


def run_demo(
    stack: Stack, signature_file: Path, *, trials: int, out_dir: Path, target: str = "cpu"
) -> bool:
    """Run the demo against `stack`; whether the downloaded kernel matched the reference
    (UserError where the tuning itself failed: no worker for the target, say).
    The compiler (its reference evaluator, the naive schedule) is this machine's own, as the
    demo runs the whole service here. A CUDA kernel runs on torch tensors on this machine's
    GPU, as a user's model would call it (`scripts/gpu_checks service`)."""
    from tunehub.compiler.flops import contraction_flops
    from tunehub.compiler.inputs import random_inputs
    from tunehub.compiler.program import load
    from tunehub.compiler.reference import evaluate
    from tunehub.compiler.space import Space, space_for
    from tunehub.compiler.verify import compare, reduce_extent

    console = uncut_console(highlight=False)
    workers = "1 worker" if len(stack.workers) == 1 else f"{len(stack.workers)} workers"
    redis = "a private redis-server" if stack.private_redis else "given"
    console.print("[bold]tunehub demo[/]: the whole service on this machine")
    console.print(f"  redis    {stack.redis_url} ({redis})")
    console.print(f"  api      {stack.url}")
    console.print(f"  daemons  a tuner and {workers} (logs in {stack.config.log_dir})")
    document = read_signature(signature_file)
    program = load(document)
    with Client(stack.url) as client:
        started = time.monotonic()
        submitted = client.submit(document, target=target, trials=trials)
        console.print(
            f"submitted {signature_file.name} over HTTP: tuning {submitted.id} "
            f"{submitted.outcome} ({trials} trials on {submitted.target})"
        )
        with progress_bar() as on_progress:
            tuning = client.wait(submitted.id, on_progress=on_progress)
        elapsed = time.monotonic() - started
        if tuning.status != TuningStatus.DONE or tuning.best is None:
            raise UserError(f"tuning {tuning.id} ended {tuning.status}: {tuning.error}")
        best = client.best(tuning.workload_key, target=tuning.target, symbols=tuning.symbols)
        naive_key = Space.key(space_for(program, Target.parse(tuning.target)).naive())
        naive = next(
            (
                r
                for r in client.records(
                    tuning.workload_key,
                    target=tuning.target,
                    status=RecordStatus.OK,
                    symbols=tuning.symbols,
                )
                if Space.key(r.config) == naive_key
            ),
            None,
        )
        assert best.artifact_sha256 is not None  # a verified record always has one
        kernel_dir = client.download(best.artifact_sha256, out_dir)

    flops = contraction_flops(program, tuning.symbols)
    table = Table(title=f"{program.name} on {tuning.target}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    naive_s = naive.latency_s if naive else None
    table.add_row("naive", _latency(naive_s, flops))
    table.add_row("best", _latency(best.latency_s, flops))
    if naive_s and best.latency_s:
        table.add_row("speedup", f"{naive_s / best.latency_s:.1f}x")
    table.add_row("trials", f"{tuning.trials_done}, tuned in {elapsed:.1f} s")
    table.add_row("workload", best.workload_key)
    table.add_row("config", ", ".join(f"{k}={v}" for k, v in best.config.items()))
    table.add_row("artifact", best.artifact_sha256)
    console.print(table)

    kernel = load_kernel(kernel_dir)
    inputs = random_inputs(program, tuning.symbols, seed=CHECK_SEED)
    device = target_runtime(Target.parse(tuning.target).kind).torch_device
    arguments = [_on_device(inputs[t.name], device) for t in program.inputs]
    returned = kernel(*arguments)
    outputs = [_on_host(x) for x in (returned if isinstance(returned, tuple) else (returned,))]
    expected = evaluate(program, inputs, tuning.symbols)
    ok = True
    for name, actual in zip(program.outputs, outputs, strict=True):
        terms = reduce_extent(program, name, tuning.symbols)
        result = compare(expected[name], actual, program.buffer(name).dtype, reduce_extent=terms)
        verdict = "[green]matches[/]" if result.ok else "[red]does not match[/]"
        console.print(
            f"downloaded the best kernel, loaded it with load_kernel and ran it on new "
            f"{f'torch {device} tensors' if device else 'numpy arrays'}: {name} {verdict} the "
            f"reference "
            f"(max abs error {result.max_abs_err:.2g})"
        )
        ok = ok and result.ok
    return ok


def _on_device(array: np.ndarray, device: str | None) -> Any:
    """`array` where the kernel reads it: a torch tensor on `device` (the current GPU for
    CUDA kernels), or the array itself for kernels of host memory."""
    if device is None:
        return array
    import torch

    return torch.from_numpy(np.ascontiguousarray(array)).to(device)


def _on_host(value: Any) -> np.ndarray:
    return value.cpu().numpy() if hasattr(value, "cpu") else np.asarray(value)


def _latency(value: float | None, flops: int | None) -> str:
    if value is None:
        return "-"
    rate = f"  ({flops / value / 1e9:.2f} GFLOP/s)" if flops else ""
    return seconds(value) + rate
