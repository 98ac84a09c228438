"""Real `tunehub worker` daemons for tests: separate processes, started and killed at will.

Each daemon is `python -m tunehub.worker.daemon` (what `tunehub worker` runs), its output in a
log file next to the test's other files; `Fleet.start` returns once every new daemon is registered.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from redis import Redis

from tunehub.worker.registry import list_workers

ROOT = Path(__file__).resolve().parents[2]
REGISTER_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


@dataclass
class WorkerProcess:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


class Fleet:
    """Worker daemons started for one test (or module); `stop_all` ends those still running."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.processes: list[WorkerProcess] = []

    def start(self, redis_url: str, count: int = 1, *args: str) -> list[WorkerProcess]:
        """Start `count` daemons on `redis_url` (extra command-line `args` for each) and wait
        until all of them are registered."""
        self.directory.mkdir(parents=True, exist_ok=True)
        started = []
        for _ in range(count):
            name = f"test-worker-{len(self.processes) + 1}"
            log = self.directory / f"{name}.log"
            command = [
                sys.executable,
                "-m",
                "tunehub.worker.daemon",
                "--redis",
                redis_url,
                "--name",
                name,
            ]
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [*command, *args], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=out
                )
            process = WorkerProcess(name, proc, log)
            self.processes.append(process)
            started.append(process)
        self._wait_registered(redis_url, started)
        return started

    def kill(self, process: WorkerProcess, sig: signal.Signals = signal.SIGKILL) -> int:
        """Send `sig` and wait for the process to end; its exit status (a daemon still alive
        after STOP_TIMEOUT_S fails with its log: once, in CI, a SIGINT left one running)."""
        process.proc.send_signal(sig)
        try:
            return process.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.proc.kill()
            raise AssertionError(
                f"{process.name} still ran {STOP_TIMEOUT_S:.0f} s after {sig.name}:\n"
                + process.tail()
            ) from None

    def stop_all(self) -> None:
        for process in self.processes:
            if process.proc.poll() is None:
                process.proc.terminate()
        for process in self.processes:
            try:
                process.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.proc.kill()
                process.proc.wait()

    def _wait_registered(self, redis_url: str, started: list[WorkerProcess]) -> None:
        redis = Redis.from_url(redis_url)
        deadline = time.monotonic() + REGISTER_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                names = {w.name for w in list_workers(redis)}
                if all(p.name in names for p in started):
                    return
                for p in started:
                    if p.proc.poll() is not None:
                        raise RuntimeError(f"worker {p.name} exited:\n{p.tail()}")
                time.sleep(0.1)
        finally:
            redis.close()
        raise RuntimeError("workers did not register in time:\n" + started[0].tail())
