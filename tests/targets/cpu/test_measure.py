"""The CPU runner with hand-written kernels: every way a candidate can fail, and success.

Program: out[i] = 2 * a[i] + b[i] over a symbolic length N, so symbols travel too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.signatures import AXPY, AXPY_ARGS
from tunehub.compiler.canonical import workload_key
from tunehub.compiler.kernel import Kernel, KernelArg
from tunehub.compiler.program import load
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.targets.cpu.build import CpuBuilder
from tunehub.targets.cpu.runner import CpuRunner
from tunehub.worker.measure.case import Case, CaseCache
from tunehub.worker.measure.runner import MeasureResult

PROGRAM = load(AXPY)
HEADER = "int k(const float *a, const float *b, float *out, int64_t n) {\n"
CORRECT = "for (int64_t i = 0; i < n; i++) out[i] = 2.0f * a[i] + b[i];\nreturn 0;"
TARGET = Target(kind="cpu", isa="x86_64")


def built(body: str, prelude: str = "") -> tuple[bytes, dict]:
    source = f"#include <stdint.h>\n{prelude}\n{HEADER}{body}\n}}\n"
    kernel = Kernel("c", source, "k", AXPY_ARGS, ("N",))
    result = CpuBuilder().build(kernel, TARGET, timeout_s=60)
    assert result.artifact is not None, result.log
    return result.artifact, kernel.metadata()


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Case:
    cache = CaseCache(tmp_path_factory.mktemp("cache"))
    return cache.get(PROGRAM, workload_key(PROGRAM), {"N": 1000}, seed=0)


@pytest.fixture(scope="module")
def runner() -> Iterator[CpuRunner]:
    runner = CpuRunner(threads=1)
    yield runner
    runner.close()


def measure(
    runner: CpuRunner, case: Case, body: str, timeout_s: float = 20.0, prelude: str = ""
) -> MeasureResult:
    artifact, metadata = built(body, prelude)
    return runner.run(artifact, metadata, case, timeout_s=timeout_s, repeats=3, min_repeat_s=0.002)


def test_a_correct_kernel_is_timed(runner: CpuRunner, case: Case) -> None:
    result = measure(runner, case, CORRECT)
    assert result.status is RecordStatus.OK, result.log
    assert len(result.latencies_s) == 3 and all(t > 0 for t in result.latencies_s)
    assert result.latency_s is not None and result.latency_s > 0
    assert result.max_error is not None and result.max_error < 1e-5


def test_the_child_serves_many_candidates(runner: CpuRunner, case: Case) -> None:
    starts = runner.sandbox.starts
    for _ in range(3):
        assert measure(runner, case, CORRECT).status is RecordStatus.OK
    assert runner.sandbox.starts <= starts + 1


def test_openmp_threads_come_from_the_runner(case: Case) -> None:
    body = """
    int threads = omp_get_max_threads();
    #pragma omp parallel for
    for (int64_t i = 0; i < n; i++) out[i] = 2.0f * a[i] + b[i];
    return threads == 2 ? 0 : 100 + threads;
    """
    two = CpuRunner(threads=2)
    try:
        result = measure(two, case, body, prelude="#include <omp.h>")
    finally:
        two.close()
    assert result.status is RecordStatus.OK, result.log


def test_a_segfault_is_a_runtime_error_and_the_runner_recovers(
    runner: CpuRunner, case: Case
) -> None:
    result = measure(runner, case, "*(volatile int *)0 = 1;\nreturn 0;")
    assert result.status is RecordStatus.RUNTIME_ERROR
    assert "SIGSEGV" in result.log and "first (checked) run" in result.log
    assert measure(runner, case, CORRECT).status is RecordStatus.OK


def test_an_abort_is_a_runtime_error(runner: CpuRunner, case: Case) -> None:
    result = measure(runner, case, "abort();\nreturn 0;", prelude="#include <stdlib.h>")
    assert result.status is RecordStatus.RUNTIME_ERROR
    assert "SIGABRT" in result.log


def test_an_endless_loop_is_a_run_timeout(runner: CpuRunner, case: Case) -> None:
    result = measure(
        runner, case, "volatile int spin = 1;\nwhile (spin) {}\nreturn 0;", timeout_s=1.0
    )
    assert result.status is RecordStatus.RUN_TIMEOUT
    assert "timed out after 1 s" in result.log
    assert measure(runner, case, CORRECT).status is RecordStatus.OK


def test_a_hang_in_the_timed_runs_keeps_the_verified_error(runner: CpuRunner, case: Case) -> None:
    body = (
        "static int calls = 0;\nif (++calls > 1) { volatile int s = 1; while (s) {} }\n" + CORRECT
    )
    result = measure(runner, case, body, timeout_s=1.0)
    assert result.status is RecordStatus.RUN_TIMEOUT
    assert "output verified" in result.log
    assert result.max_error is not None and result.max_error < 1e-5


def test_wrong_values_are_a_wrong_answer(runner: CpuRunner, case: Case) -> None:
    body = "for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];\nreturn 0;"
    result = measure(runner, case, body)
    assert result.status is RecordStatus.WRONG_ANSWER
    assert "out:" in result.log and "elements differ" in result.log
    assert result.max_error is not None and result.max_error > 0.01


def test_an_unwritten_element_is_caught_by_the_poison(runner: CpuRunner, case: Case) -> None:
    body = "for (int64_t i = 0; i + 1 < n; i++) out[i] = 2.0f * a[i] + b[i];\nreturn 0;"
    result = measure(runner, case, body)
    assert result.status is RecordStatus.WRONG_ANSWER
    assert "1 of 1000 elements differ" in result.log


def test_a_non_zero_return_is_a_runtime_error(runner: CpuRunner, case: Case) -> None:
    result = measure(runner, case, CORRECT.replace("return 0;", "return 7;"))
    assert result.status is RecordStatus.RUNTIME_ERROR
    assert "kernel returned 7" in result.log


def test_writing_past_the_output_is_a_runtime_error(runner: CpuRunner, case: Case) -> None:
    result = measure(runner, case, "out[n + 3] = 0.0f;\n" + CORRECT)
    assert result.status is RecordStatus.RUNTIME_ERROR
    assert "outside its buffers" in result.log


def test_writing_an_input_is_a_runtime_error(runner: CpuRunner, case: Case) -> None:
    body = CORRECT.replace("return 0;", "((float *)a)[0] = 0.5f;\nreturn 0;")
    result = measure(runner, case, body)
    assert result.status is RecordStatus.RUNTIME_ERROR
    assert "input 'a'" in result.log


def test_a_missing_entry_point_is_a_runtime_error(runner: CpuRunner, case: Case) -> None:
    artifact, metadata = built(CORRECT)
    result = runner.run(
        artifact, {**metadata, "entry": "nope"}, case, timeout_s=20, repeats=1, min_repeat_s=0.001
    )
    assert result.status is RecordStatus.RUNTIME_ERROR
    assert "nope" in result.log


def test_the_reference_is_computed_once_per_workload(tmp_path: Path) -> None:
    key, symbols = workload_key(PROGRAM), {"N": 64}
    first = CaseCache(tmp_path)
    case = first.get(PROGRAM, key, symbols, seed=3)
    assert first.computed == 1
    stamp = os.stat(case.path).st_mtime_ns
    # Another worker process on the same machine: finds the file, computes nothing.
    second = CaseCache(tmp_path)
    assert second.get(PROGRAM, key, symbols, seed=3).path == case.path
    assert second.computed == 0 and os.stat(case.path).st_mtime_ns == stamp
    # Other symbols or another seed are other cases.
    assert second.get(PROGRAM, key, {"N": 65}, seed=3).path != case.path
    assert second.get(PROGRAM, key, symbols, seed=4).path != case.path
    assert second.computed == 2


def test_a_damaged_cache_file_is_recomputed(tmp_path: Path) -> None:
    key, symbols = workload_key(PROGRAM), {"N": 64}
    path = CaseCache(tmp_path).get(PROGRAM, key, symbols, seed=0).path
    path.write_bytes(b"not an npz")
    again = CaseCache(tmp_path)
    inputs, expected = again.get(PROGRAM, key, symbols, seed=0).load()
    assert again.computed == 1
    assert (expected["out"] == 2.0 * inputs["a"] + inputs["b"]).all()


def test_a_slow_kernel_gets_fewer_repeats_not_a_timeout(runner: CpuRunner, case: Case) -> None:
    body = "usleep(250000);\n" + CORRECT  # 0.25 s per call
    artifact, metadata = built(body, prelude="#include <unistd.h>")
    result = runner.run(artifact, metadata, case, timeout_s=2.0, repeats=7, min_repeat_s=0.01)
    assert result.status is RecordStatus.OK, result.log
    assert 1 <= len(result.latencies_s) < 7


def test_signatures_of_one_workload_share_a_case_under_their_own_names(
    runner: CpuRunner, tmp_path: Path
) -> None:
    renamed = json.loads(
        json.dumps(AXPY).replace('"a"', '"x"').replace('"b"', '"y"').replace('"out"', '"z"')
    )
    renamed["computes"][0]["expr"] = "2.0 * x[i] + y[i]"
    program = load(renamed)
    assert workload_key(program) == workload_key(PROGRAM)
    cache = CaseCache(tmp_path)
    original = cache.get(PROGRAM, workload_key(PROGRAM), {"N": 500}, seed=0)
    case = cache.get(program, workload_key(program), {"N": 500}, seed=0)
    assert case.path == original.path and cache.computed == 1
    args = tuple(
        KernelArg(n, a.shape, a.dtype, a.role) for n, a in zip("xyz", AXPY_ARGS, strict=True)
    )
    for case_, args_ in ((original, AXPY_ARGS), (case, args), (original, AXPY_ARGS)):
        kernel = Kernel("c", f"#include <stdint.h>\n{HEADER}{CORRECT}\n}}\n", "k", args_, ("N",))
        artifact = CpuBuilder().build(kernel, TARGET, timeout_s=60).artifact
        assert artifact is not None
        result = runner.run(
            artifact, kernel.metadata(), case_, timeout_s=20, repeats=1, min_repeat_s=0.001
        )
        assert result.status is RecordStatus.OK, result.log
