"""An RQ job for the measuring-slot tests, run by real worker daemons: it holds the measure
lock a measurement would, and waits there until `parties` jobs hold theirs at once."""

from __future__ import annotations

import os
import time
from typing import Any

from rq import get_current_job

from tunehub.targets.cuda import device
from tunehub.worker.measure_lock import measure_lock, measuring_unit


def meet(key: str, parties: int, timeout_s: float) -> dict[str, Any]:
    """Under this daemon's measure lock, count itself in at `key` and wait for `parties`
    jobs to be counted: only daemons measuring in parallel ever get there."""
    job = get_current_job()
    assert job is not None
    redis = job.connection
    with measure_lock(redis, measuring_unit()):
        redis.incr(key)
        deadline = time.monotonic() + timeout_s
        while int(redis.get(key) or 0) < parties:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{parties} measurements never held their locks at once")
            time.sleep(0.05)
    return {
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "unit": measuring_unit(),
        "gpus": [gpu["gpu_name"] for gpu in device.gpus()],
        "pid": os.getpid(),
    }
