"""Queue and key names: one place, round trips, no incomplete targets."""

from __future__ import annotations

import pytest

from tunehub.schemas.target import Target
from tunehub.worker.queues import (
    Phase,
    measure_lock_key,
    parse_queue,
    queue_name,
    tuner_key,
    worker_key,
    worker_queues,
)

AVX512 = Target(kind="cpu", isa="x86_64-avx512")
SM90 = Target(kind="cuda", arch="sm_90")


def test_queue_names_name_the_stage_and_the_complete_target() -> None:
    assert queue_name(Phase.BUILD, AVX512) == "tunehub:build:cpu:x86_64-avx512"
    assert queue_name(Phase.MEASURE, SM90) == "tunehub:measure:cuda:sm_90"


def test_a_queue_needs_a_complete_target() -> None:
    with pytest.raises(ValueError, match="incomplete"):
        queue_name(Phase.BUILD, Target(kind="cpu"))


@pytest.mark.parametrize("stage", list(Phase))
@pytest.mark.parametrize("target", [AVX512, SM90, Target(kind="cpu", isa="generic")])
def test_queue_names_parse_back(stage: Phase, target: Target) -> None:
    assert parse_queue(queue_name(stage, target)) == (stage, target)


@pytest.mark.parametrize(
    "name",
    [
        "default",
        "tunehub:build:cpu",
        "tunehub:run:cpu:x86_64",
        "rq:build:cpu:x86_64",
        "tunehub:measure:cpu:pentium",
        "tunehub:build:gpu:sm_90",
    ],
)
def test_other_names_are_not_build_or_measure_queues(name: str) -> None:
    assert parse_queue(name) is None


def test_workers_take_every_build_before_any_measurement() -> None:
    assert worker_queues([AVX512, SM90]) == [
        "tunehub:build:cpu:x86_64-avx512",
        "tunehub:build:cuda:sm_90",
        "tunehub:measure:cpu:x86_64-avx512",
        "tunehub:measure:cuda:sm_90",
    ]


def test_keys_live_under_the_tunehub_prefix() -> None:
    assert worker_key("w1") == "tunehub:worker:w1"
    assert measure_lock_key("boot-1") == "tunehub:lock:measure:boot-1"
    assert tuner_key("t1") == "tunehub:tuner:t1"
