"""Job functions: one candidate (signature, target, config) in, one complete result out.

The local executor calls these in its process pool and RQ workers call the same functions, so
requests and results are plain picklable dataclasses of JSON-like values. A candidate's
every failure comes back as a result with its status and log, never as an exception: a tuning
of hundreds of candidates must not stop at the first bad one.

The work splits in two halves so an executor can overlap them correctly: `build_candidate`
(check, lower, features, compile) may run in parallel; `measure_candidate` must run one at a
time per machine, since concurrent timings on a 2-core box measure each other.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import os
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tunehub.compiler import features
from tunehub.compiler.canonical import workload_key
from tunehub.compiler.errors import InvalidConfig
from tunehub.compiler.ir import Program
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Space
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.worker import device
from tunehub.worker.backend import worker_backend
from tunehub.worker.measure.case import CaseCache
from tunehub.worker.measure.runner import Runner


@dataclass(frozen=True)
class CandidateRequest:
    """One candidate to build and measure. `target` must be complete (`isa`/`arch` set)."""

    signature: dict[str, Any]
    target: dict[str, Any]
    config: dict[str, Any]
    symbols: dict[str, int] = field(default_factory=dict)
    seed: int = 0  # of the random inputs
    threads: int = 1
    build_timeout_s: float = 60.0
    run_timeout_s: float = 20.0  # the whole measurement: checked run, warm-up, repeats
    repeats: int = 7
    min_repeat_s: float = 0.01  # each repeat is a batch of calls at least this long


@dataclass(frozen=True)
class CandidateResult:
    """The outcome of a candidate. `latency_s` is the median of `latencies_s` (OK only).

    `build_candidate` returns a partial result: status OK there means "built, not measured
    yet" (`measured` is False); only `measure_candidate` completes it.
    """

    status: RecordStatus
    log: str = ""  # why it failed; empty on success
    latency_s: float | None = None
    latencies_s: list[float] = field(default_factory=list)
    max_error: float | None = None
    build_time_s: float | None = None
    measure_time_s: float | None = None
    features: dict[str, float] = field(default_factory=dict)
    feature_version: int | str | None = None
    source: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # Kernel.metadata()
    artifact: bytes | None = None
    sha256: str | None = None
    build_stats: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)  # device.fingerprint
    measured: bool = False


def run_candidate(request: CandidateRequest) -> CandidateResult:
    return measure_candidate(request, build_candidate(request))


def run_batch(requests: Sequence[CandidateRequest]) -> list[CandidateResult]:
    """Build all candidates in parallel (gcc runs in subprocesses, so threads suffice), then
    measure them one by one with nothing else running."""
    with ThreadPoolExecutor(max_workers=device.cpu_cores()) as pool:
        built = list(pool.map(build_candidate, requests))
    return [measure_candidate(r, b) for r, b in zip(requests, built, strict=True)]


def build_candidate(request: CandidateRequest) -> CandidateResult:
    """Check the config, lower it, extract its features, compile it. A CUDA candidate's ptxas
    features are then what ptxas reported, not the estimates `features.extract` gives."""
    try:
        signature = _json(request.signature)
        program, target = _program(signature), _target(request)
        _check_request(request, program)
    except Exception as exc:  # a malformed request: the caller's bug, reported as a result
        log = f"invalid request: {type(exc).__name__}: {exc}"
        return CandidateResult(RecordStatus.INVALID_CONFIG, log=log)
    machine = device.fingerprint(target, request.threads)
    try:
        reason = _space(signature, target).check(request.config)
        if reason is not None:
            return CandidateResult(RecordStatus.INVALID_CONFIG, log=reason, machine=machine)
        kernel = lower(program, target, request.config)
        vector = features.extract(program, target, request.config, request.symbols)
    except InvalidConfig as exc:
        return CandidateResult(RecordStatus.INVALID_CONFIG, log=str(exc), machine=machine)
    except Exception:  # a compiler bug: the candidate still gets its record
        log = f"lowering failed:\n{traceback.format_exc()}"
        return CandidateResult(RecordStatus.COMPILE_ERROR, log=log, machine=machine)
    built = worker_backend(target).builder().build(kernel, target, request.build_timeout_s)
    return CandidateResult(
        status=built.status,
        log="" if built.status is RecordStatus.OK else built.log,
        build_time_s=built.build_time_s,
        features=features.with_build_stats(vector, built.stats),
        feature_version=features.FEATURE_VERSION,
        source=kernel.source,
        metadata=kernel.metadata(),
        artifact=built.artifact,
        sha256=built.sha256,
        build_stats={**built.stats, "log": built.log} if built.log else built.stats,
        machine=machine,
    )


def measure_candidate(request: CandidateRequest, built: CandidateResult) -> CandidateResult:
    """Verify and time a built candidate in the sandboxed child; failures pass through."""
    if built.status is not RecordStatus.OK or built.measured:
        return built
    start = time.perf_counter()
    target = _target(request)
    machine = device.fingerprint(target, request.threads)

    def failed(log: str) -> CandidateResult:
        status = RecordStatus.RUNTIME_ERROR
        return dataclasses.replace(built, status=status, log=log, machine=machine, measured=True)

    reason = worker_backend(target).cannot_measure(target)
    if reason is not None:
        return failed(reason)
    assert built.artifact is not None
    try:
        signature = _json(request.signature)
        program = _program(signature)
        case = _cases().get(program, _workload_key(signature), request.symbols, request.seed)
    except Exception:  # the reference, not the candidate, failed; still a record
        return failed(f"could not compute the reference outputs:\n{traceback.format_exc()}")
    result = _runner(target, request.threads).run(
        built.artifact,
        built.metadata,
        case,
        timeout_s=request.run_timeout_s,
        repeats=request.repeats,
        min_repeat_s=request.min_repeat_s,
    )
    return dataclasses.replace(
        built,
        status=result.status,
        log=result.log,
        latency_s=result.latency_s,
        latencies_s=result.latencies_s,
        max_error=result.max_error,
        measure_time_s=time.perf_counter() - start,
        machine=machine,
        measured=True,
    )


def _target(request: CandidateRequest) -> Target:
    target = Target(**request.target)
    if not target.complete:
        raise ValueError(f"target {target} is incomplete: name its isa or arch")
    return target


def _check_request(request: CandidateRequest, program: Program) -> None:
    declared = {s.name: s for s in program.symbols}
    if set(request.symbols) != set(declared):
        raise ValueError(f"symbols {sorted(request.symbols)} given, {sorted(declared)} declared")
    for name, value in request.symbols.items():
        if not declared[name].min <= value <= declared[name].max:
            symbol = declared[name]
            raise ValueError(f"{name}={value} is outside [{symbol.min}, {symbol.max}]")
    if not isinstance(request.config, dict):
        raise TypeError(f"config must be a dict, not {type(request.config).__name__}")
    if request.threads < 1 or request.repeats < 1:
        raise ValueError("threads and repeats must be at least 1")


def _json(signature: dict[str, Any]) -> str:
    """The cache key of a signature (dicts are not hashable)."""
    return json.dumps(signature, sort_keys=True)


# A tuning sends the same signature hundreds of times: parse it, build its space once.
@functools.lru_cache(maxsize=32)
def _program(signature: str) -> Program:
    return load(signature)


@functools.lru_cache(maxsize=32)
def _space(signature: str, target: Target) -> Space:
    return space_for(_program(signature), target)


@functools.lru_cache(maxsize=32)
def _workload_key(signature: str) -> str:
    return workload_key(_program(signature))


# Per process: a fork of a worker (a process pool) makes its own runners and cache.
_state: dict[str, Any] = {"pid": None}


def _cases() -> CaseCache:
    return _process_state()["cases"]


def _runner(target: Target, threads: int) -> Runner:
    """The runners a target kind keeps apart (per CPU thread count; one for the GPU, whose
    child outlives candidates), made once per process."""
    runners = _process_state()["runners"]
    backend = worker_backend(target)
    key = (target.kind, backend.runner_key(threads))
    if key not in runners:
        runners[key] = backend.runner(threads)
    return runners[key]


def _process_state() -> dict[str, Any]:
    if _state["pid"] != os.getpid():
        _state.update(pid=os.getpid(), cases=CaseCache(), runners={})
    return _state


@atexit.register
def _close_runners() -> None:
    if _state["pid"] == os.getpid():
        for runner in _state["runners"].values():
            runner.close()
