"""The library baseline: the same computation through numpy (BLAS for its sums of products),
on as many threads as the kernels get, timed as kernels are. A tuned kernel is worth using only
where it beats what the user already has; every CPU tuning reports the ratio.

numpy here is what a user would write: each compute of the signature as one array expression,
16-bit sums of products contracted by BLAS in float32 (`reference.evaluate(exact=False)`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping

from threadpoolctl import threadpool_limits

from tunehub.compiler.inputs import random_inputs
from tunehub.compiler.ir import Program
from tunehub.compiler.reference import evaluate

MIN_REPEAT_S = 0.05
REPEATS = 5


def library_latency(program: Program, symbols: Mapping[str, int], threads: int) -> float:
    """Median seconds per call of the numpy implementation of `program` at `symbols`, each
    repeat a batch of calls lasting at least MIN_REPEAT_S (the kernels' timing rule)."""
    inputs = random_inputs(program, dict(symbols), seed=0)
    return median_call_s(lambda: evaluate(program, inputs, symbols, exact=False), threads)


def median_call_s(call: Callable[[], object], threads: int) -> float:
    """Median seconds per call of `call` on at most `threads` BLAS/OpenMP threads, by the
    kernels' timing rule: REPEATS batches of calls lasting at least MIN_REPEAT_S each."""
    with threadpool_limits(limits=threads):
        start = time.perf_counter()
        call()
        first = time.perf_counter() - start
        calls = max(1, int(MIN_REPEAT_S / max(first, 1e-9)))
        samples = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            for _ in range(calls):
                call()
            samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)
