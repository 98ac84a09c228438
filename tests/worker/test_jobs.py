"""Job functions end to end: real signature -> space -> lowering -> gcc -> sandboxed run."""

from __future__ import annotations

import pickle
import random

import pytest

from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target
from tunehub.worker import device
from tunehub.worker.jobs import (
    CandidateRequest,
    build_candidate,
    measure_candidate,
    run_batch,
    run_candidate,
)

SIGNATURE = {
    "version": 1,
    "name": "matmul_bias",
    "symbols": {"M": {"min": 1, "max": 256}},
    "inputs": [
        {"name": "A", "shape": ["M", 40], "dtype": "float32"},
        {"name": "B", "shape": [40, 48], "dtype": "float32"},
        {"name": "bias", "shape": [48], "dtype": "float32"},
    ],
    "computes": [
        {
            "name": "acc",
            "axes": ["i", "j"],
            "shape": ["M", 48],
            "dtype": "float32",
            "reduce": {"op": "sum", "axes": {"k": 40}},
            "expr": "A[i, k] * B[k, j]",
        },
        {
            "name": "out",
            "axes": ["i", "j"],
            "shape": ["M", 48],
            "dtype": "float32",
            "expr": "max(acc[i, j] + bias[j], 0.0)",
        },
    ],
    "outputs": ["out"],
}
TARGET = Target(kind="cpu", isa=device.cpu_isa())
SPACE = space_for(load(SIGNATURE), TARGET)


def request(config: dict, **changes: object) -> CandidateRequest:
    fields: dict = {
        "signature": SIGNATURE,
        "target": TARGET.model_dump(),
        "config": config,
        "symbols": {"M": 33},
        "repeats": 3,
        "min_repeat_s": 0.002,
        **changes,
    }
    return CandidateRequest(**fields)


def test_the_naive_config_runs_end_to_end() -> None:
    result = run_candidate(request(SPACE.naive()))
    assert result.status is RecordStatus.OK, result.log
    assert result.measured and result.log == ""
    assert result.latency_s is not None and result.latency_s > 0
    assert len(result.latencies_s) == 3
    assert result.max_error is not None and result.max_error < 1e-3
    assert result.features and result.feature_version is not None
    assert result.artifact is not None and result.sha256 is not None
    assert result.source is not None and result.metadata["entry"] in result.source
    assert result.build_time_s is not None and result.build_stats["artifact_bytes"] > 0
    assert result.machine["cpu_isa"] == device.cpu_isa() and result.machine["threads"] == 1


def test_sampled_configs_are_correct() -> None:
    rng = random.Random(0)
    configs = [SPACE.default()] + [SPACE.sample(rng) for _ in range(3)]
    results = run_batch([request(c, threads=2) for c in configs])
    for config, result in zip(configs, results, strict=True):
        assert result.status is RecordStatus.OK, (config, result.log)


def test_halves_travel_between_processes() -> None:
    req = pickle.loads(pickle.dumps(request(SPACE.default())))
    built = pickle.loads(pickle.dumps(build_candidate(req)))
    assert built.status is RecordStatus.OK and not built.measured
    assert built.latency_s is None and built.artifact is not None
    measured = measure_candidate(req, built)
    assert measured.status is RecordStatus.OK, measured.log
    assert measured.sha256 == built.sha256 and measured.measured
    assert measure_candidate(req, measured) is measured  # measuring twice is a no-op


def test_an_invalid_config_is_not_compiled() -> None:
    result = run_candidate(request({**SPACE.naive(), "no_such_knob": 1}))
    assert result.status is RecordStatus.INVALID_CONFIG
    assert "no_such_knob" in result.log
    assert result.artifact is None and result.source is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"symbols": {}}, "symbols"),
        ({"symbols": {"M": 1000}}, "outside"),
        ({"target": {"kind": "cpu"}}, "incomplete"),
        ({"target": {"kind": "cpu", "isa": "sse9"}}, "isa"),
        ({"signature": {**SIGNATURE, "outputs": ["nope"]}}, "nope"),
    ],
)
def test_a_malformed_request_is_a_result(changes: dict, message: str) -> None:
    result = run_candidate(request(SPACE.naive(), **changes))
    assert result.status is RecordStatus.INVALID_CONFIG
    assert result.log.startswith("invalid request") and message in result.log
