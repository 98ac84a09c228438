"""Measuring slots: one worker daemon per GPU (`tunehub worker --gpus all|0,1`), so an 8-GPU
node measures on eight GPUs at once instead of taking turns on one.

Each slot is a daemon process of its own (`worker.daemon`) that sees its device alone (the
kind's `device_environment`: `CUDA_VISIBLE_DEVICES` for CUDA), serves the queues of that
device's targets, and measures under that device's lock (`measure_lock.measuring_unit`). The
process that starts them waits; a signal to it reaches every slot, and when one slot ends, it
stops the others and ends too, so a supervisor (systemd, Kubernetes) sees one service that
lives or dies whole.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

from tunehub.schemas.target import kinds
from tunehub.worker.backend import worker_backend

# The measuring slot a daemon is (`kind:device`, e.g. `cuda:1`), in the environment of the
# daemons `run_slots` starts (`measure_lock.measuring_unit`).
SLOT_ENV = "TUNEHUB_WORKER_SLOT"
# How long slots get to finish their job after the signal before they are killed.
STOP_TIMEOUT_S = 60.0
_POLL_S = 0.2


@dataclass(frozen=True)
class Slot:
    """One device of one kind, and the environment that shows it alone."""

    kind: str
    device: str
    environment: dict[str, str]

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.device}"


def plan_slots(spec: str) -> list[Slot]:
    """The slots `--gpus` asks for: `all` (every device of every kind that has them), or
    device ids separated by commas (`0,1`); ValueError naming what this machine has."""
    found = [
        Slot(kind, device, worker_backend(kind).device_environment(device))
        for kind in kinds()
        for device in worker_backend(kind).devices()
    ]
    if not found:
        raise ValueError("--gpus: this machine has no GPU (none visible to its drivers)")
    if spec.strip() == "all":
        return found
    wanted = [part.strip() for part in spec.split(",")]
    if not all(part.isdigit() for part in wanted) or len(set(wanted)) < len(wanted):
        raise ValueError(f"--gpus takes `all` or distinct GPU ids like 0,1, not {spec!r}")
    here = sorted({slot.device for slot in found}, key=int)
    missing = [part for part in wanted if part not in here]
    if missing:
        raise ValueError(f"--gpus: no GPU {missing[0]} here (its GPUs: {', '.join(here)})")
    return [slot for slot in found if slot.device in wanted]


def run_slots(
    redis_url: str,
    slots: Sequence[Slot],
    *,
    threads: int | None = None,
    name: str | None = None,
    burst: bool = False,
) -> int:
    """Run a daemon per slot until one ends (or, with `burst`, until all have) or a signal
    comes; the exit status of the first that failed, else 0."""
    base = name or f"{os.uname().nodename}-{os.getpid()}"
    children = [
        _start(redis_url, slot, threads, f"{base}-{slot.kind}{slot.device}", burst)
        for slot in slots
    ]
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            codes = [child.poll() for child in children]
            ended = [code for code in codes if code is not None]
            if len(ended) == len(children) or (ended and not burst and not stopping):
                break
            time.sleep(_POLL_S)
    finally:
        _stop(children)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return next((child.returncode for child in children if child.returncode), 0)


def _start(
    redis_url: str, slot: Slot, threads: int | None, name: str, burst: bool
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tunehub.worker.daemon", "--redis", redis_url, "--name", name]
    if threads is not None:
        command += ["--threads", str(threads)]
    if burst:
        command.append("--burst")
    environment = {**os.environ, **slot.environment, SLOT_ENV: slot.label}
    return subprocess.Popen(command, env=environment)


def _stop(children: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to the slots still running (each finishes its job first), then wait for them;
    SIGKILL after STOP_TIMEOUT_S."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for child in children:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
