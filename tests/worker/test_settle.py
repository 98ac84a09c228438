"""`settle` returns once the process's other threads are idle: after a spinning thread has
stopped, after numpy's BLAS pool has gone to sleep, and no later than its bound when a thread
never stops."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from tunehub.worker.measure.settle import IDLE_SHARE, READABLE, WINDOW_S, others_cpu_s, settle

pytestmark = pytest.mark.skipif(not READABLE.exists(), reason="no per-thread CPU times here")


def _spin(until: threading.Event | float) -> threading.Thread:
    """A thread busy until `until` (a time on perf_counter's clock, or an event), as a
    pool's thread spins waiting for work."""

    def run() -> None:
        while not (
            until.is_set() if isinstance(until, threading.Event) else time.perf_counter() > until
        ):
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_other_threads_cpu_time_is_theirs_not_the_callers() -> None:
    before = others_cpu_s()
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:  # the caller busy
        pass
    mine = others_cpu_s() - before
    stop = threading.Event()
    thread = _spin(stop)
    before = others_cpu_s()
    time.sleep(0.05)
    theirs = others_cpu_s() - before
    stop.set()
    thread.join()
    assert mine < theirs


def test_it_returns_after_a_spinning_thread_has_stopped() -> None:
    thread = _spin(time.perf_counter() + 0.2)
    settle(max_wait_s=5.0)
    assert not thread.is_alive()


def test_it_gives_up_on_a_thread_that_never_stops() -> None:
    stop = threading.Event()
    thread = _spin(stop)
    waited = settle(max_wait_s=0.1)
    assert thread.is_alive() and waited >= 0.1
    stop.set()
    thread.join()


def test_numpys_blas_threads_are_asleep_once_it_returns() -> None:
    """OpenBLAS's threads spin for about 0.1 s after a product (where numpy has two threads
    on this machine); `settle` waits them out."""
    a = np.ones((256, 256), np.float32)
    with threadpool_limits(limits=2):
        for _ in range(50):
            a @ a
        settle(max_wait_s=5.0)
        before = others_cpu_s()
        time.sleep(WINDOW_S)
        assert others_cpu_s() - before < IDLE_SHARE * WINDOW_S
