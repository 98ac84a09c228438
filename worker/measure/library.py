"""The library baselines: the code a user would write for a program with the array libraries
at hand (numpy, with BLAS for its sums of products; torch where it is installed), on as many
threads as the kernels get, timed as kernels are. A tuned kernel is worth using only where it
beats what the user already has; every CPU tuning reports the ratio, and `tune --verbose`
prints the code so that a user can time it.

The code is `worker.measure.expression`'s (torch's own ops where `worker.measure.torch_ops`
finds one); each library's batches alternate with the others',
so that a machine's load weighs on all of them alike.
"""

from __future__ import annotations

import importlib
import logging
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from tunehub.compiler.inputs import random_inputs
from tunehub.compiler.ir import Program
from tunehub.worker.backend import Baseline
from tunehub.worker.measure.expression import NUMPY, Code, render
from tunehub.worker.measure.settle import settle
from tunehub.worker.measure.torch_ops import render_torch

log = logging.getLogger(__name__)

MIN_REPEAT_S = 0.05
REPEATS = 5
WARM_S = 0.02


def library_baselines(program: Program, symbols: Mapping[str, int], threads: int) -> list[Baseline]:
    """numpy's latency for `program` at `symbols`, and torch's where torch is installed, each
    where the library runs the code (torch's unsigned shifts, say, may not), fastest first.
    A baseline is what a report sets beside the tuned kernel: one that cannot run is left out
    (and logged), never the tuning's failure."""
    values = dict(symbols)
    inputs = random_inputs(program, values, seed=0)
    runs = [_numpy_call(program, values, inputs), _torch_call(program, values, inputs)]
    found = [run for run in runs if run is not None]
    latencies = alternated_call_s([call for _, call in found], threads)
    baselines = [
        Baseline(code.dialect, latency, code.text)
        for (code, _), latency in zip(found, latencies, strict=True)
    ]
    return sorted(baselines, key=lambda b: b.latency_s)


def library_latency(program: Program, symbols: Mapping[str, int], threads: int) -> float:
    """numpy's median seconds per call of `program` at `symbols` (the benchmarks' column)."""
    inputs = random_inputs(program, dict(symbols), seed=0)
    return median_call_s(compiled(render(program, dict(symbols)), inputs), threads)


def compiled(code: Code, inputs: Mapping[str, Any]) -> Callable[[], object]:
    """A call of `code` on `inputs`: the lines as one function's body, names local."""
    names = sorted(inputs)
    body = "".join(f"    {line}\n" for line in code.lines)
    source = f"def _run({', '.join(names)}):\n{body}    return {', '.join(code.outputs)}\n"
    namespace = _namespace(code.dialect)
    exec(compile(source, f"<{code.dialect} baseline>", "exec"), namespace)
    run = namespace["_run"]
    args = [inputs[name] for name in names]
    return lambda: run(*args)


def _namespace(dialect: str) -> dict[str, Any]:
    """The modules the code names: numpy's erf is scipy's where scipy is installed."""
    if dialect == "torch":
        torch = importlib.import_module("torch")
        return {"torch": torch, "F": torch.nn.functional}
    import ml_dtypes

    try:
        from scipy.special import erf
    except ImportError:
        import math

        erf = np.frompyfunc(math.erf, 1, 1)
    return {"np": np, "ml_dtypes": ml_dtypes, "erf": erf}


def _numpy_call(
    program: Program, symbols: dict[str, int], inputs: Mapping[str, np.ndarray]
) -> tuple[Code, Callable[[], object]] | None:
    return _checked(program, render(program, symbols, NUMPY), inputs)


def _torch_call(
    program: Program, symbols: dict[str, int], inputs: Mapping[str, np.ndarray]
) -> tuple[Code, Callable[[], object]] | None:
    """torch's code and call, or None without torch or where torch cannot run the code."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return None
    tensors = {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in inputs.items()}
    with torch.inference_mode():
        return _checked(program, render_torch(program, symbols), tensors)


def _checked(
    program: Program, code: Code, arrays: Mapping[str, Any]
) -> tuple[Code, Callable[[], object]] | None:
    """`code`'s call on `arrays` once it has run, or None where the library cannot run it
    (dtypes and ops it lacks, or code the writer got wrong)."""
    try:
        call = compiled(code, arrays)
        call()
    except (TypeError, RuntimeError, ValueError, IndexError) as exc:
        log.warning("no %s baseline for %s: %s", code.dialect, program.name, exc)
        return None
    return code, call


def median_call_s(call: Callable[[], object], threads: int) -> float:
    """Median seconds per call of `call` (`alternated_call_s` of it alone)."""
    return alternated_call_s([call], threads)[0]


def alternated_call_s(calls: list[Callable[[], object]], threads: int) -> list[float]:
    """Median seconds per call of each of `calls` on at most `threads` BLAS/OpenMP (and
    torch) threads, by the kernels' timing rule: REPEATS batches of calls lasting at least
    MIN_REPEAT_S each, the calls' batches alternating. A batch of another call than the one
    timed last starts once the threads of that one have gone passive (`settle`: a pool
    still spinning from another library's batch holds a core, OpenBLAS's for 0.1 s, longer
    than a batch), and after WARM_S of untimed calls, which wake the call's own pool as a
    user's repeated calls keep it awake (the first call after a pool slept took up to 10 ms
    of a 0.1 ms matmul's on two threads); the batches' length comes from those calls."""
    last: Callable[[], object] | None = None

    def switch_to(call: Callable[[], object]) -> float:
        """Seconds per call of `call` while it warms up, after `settle`."""
        nonlocal last
        settle()
        last = call
        count, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < WARM_S or count == 0:
            call()
            count += 1
        return elapsed / count

    def timed(call: Callable[[], object], n: int) -> float:
        if call is not last:
            switch_to(call)
        start = time.perf_counter()
        for _ in range(n):
            call()
        return (time.perf_counter() - start) / n

    with threadpool_limits(limits=threads), _torch_threads(threads):
        batch = [max(1, int(MIN_REPEAT_S / max(switch_to(call), 1e-9))) for call in calls]
        samples: list[list[float]] = [[] for _ in calls]
        for _ in range(REPEATS):
            for call, n, times in zip(calls, batch, samples, strict=True):
                times.append(timed(call, n))
    return [statistics.median(times) for times in samples]


class _torch_threads:
    """torch's intra-op threads set to `threads` while open (where torch is loaded), and
    gradients off."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.saved: list[Any] = []

    def __enter__(self) -> None:
        import sys

        torch = sys.modules.get("torch")
        if torch is None:
            return
        self.saved = [torch, torch.get_num_threads(), torch.inference_mode()]
        torch.set_num_threads(self.threads)
        self.saved[2].__enter__()

    def __exit__(self, *exc: object) -> None:
        if self.saved:
            torch, threads, mode = self.saved
            mode.__exit__(None, None, None)
            torch.set_num_threads(threads)
