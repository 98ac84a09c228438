"""Waiting for thread pools to go passive before timing another library's calls.

A pool that has just finished work keeps its threads spinning for a while, so that the next
call finds them awake: OpenBLAS's (numpy's BLAS) for 2**28 cycles, about 0.1 s; libgomp's
(torch's) for a few milliseconds. A spinning thread holds a core, and a library timed in that
window on as many threads as the machine has cores waits on it at each of its barriers: its
time is then not what a user timing it alone gets. `settle` waits until the process's other
threads are idle, measured (Linux's per-thread CPU time), not guessed.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

TASKS = Path("/proc/self/task")
READABLE = Path("/proc/thread-self/schedstat")  # Linux with scheduler statistics
WINDOW_S = 0.02  # idle means: the other threads used under IDLE_SHARE of one core over this
IDLE_SHARE = 0.05
MAX_WAIT_S = 0.5  # OpenBLAS's 2**28 cycles at 0.6 GHz; a busy thread of the process's own
# (not a pool's) is never waited out beyond it


def settle(max_wait_s: float = MAX_WAIT_S) -> float:
    """Wait until this process's threads other than the caller's are idle (each pool's
    threads asleep), at most `max_wait_s` (where threads' CPU time cannot be read, that
    long); the seconds waited."""
    start = time.perf_counter()
    if not READABLE.exists():
        time.sleep(max_wait_s)
        return max_wait_s
    while True:
        before = others_cpu_s()
        time.sleep(WINDOW_S)
        waited = time.perf_counter() - start
        if others_cpu_s() - before < IDLE_SHARE * WINDOW_S or waited >= max_wait_s:
            return waited


def others_cpu_s() -> float:
    """The CPU seconds this process's threads other than the caller's have used so far
    (`/proc/self/task/*/schedstat`: nanoseconds on a CPU, then waiting, then slices)."""
    me = threading.get_native_id()
    total = 0
    for task in os.listdir(TASKS):
        if int(task) == me:
            continue
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # ended since
            total += int((TASKS / task / "schedstat").read_text().split()[0])
    return total / 1e9
