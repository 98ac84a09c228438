"""A persistent child process that serves one request at a time under a deadline.

Starting Python with numpy costs ~0.1 s, more than many candidates take to measure, so the
child lives across requests; it is killed (its whole process group) on a timeout and replaced
after any failure, since a kernel that misbehaved may have left it damaged. The child is a
fresh interpreter (`python -m MODULE`), never a fork of the worker: nothing of the parent's
state (a CUDA context, a Redis connection, threads) is inherited.

Protocol: the parent sends one picklable request; the child answers with tuples whose first
item is a tag. `ready` starts the run deadline (what came before, interpreter start-up and
loading the test case, has a separate, generous limit), `result` ends the exchange.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import tunehub

# Where `tunehub` itself is imported from (a checkout, or site-packages): a child imports
# tunehub from there whether or not it is installed.
_IMPORT_ROOT = str(Path(tunehub.__file__).resolve().parents[1])
STDERR_TAIL_CHARS = 4000


@dataclass
class Exchange:
    """What came back from one request: the replies in order, and how it ended if not with
    a `result` (timed out, or the child died with `exit_code`, negative for a signal)."""

    replies: list[tuple[Any, ...]] = field(default_factory=list)
    timed_out: bool = False
    exit_code: int | None = None
    stderr: str = ""

    def reply(self, tag: str) -> tuple[Any, ...] | None:
        return next((r for r in self.replies if r[0] == tag), None)


class Sandbox:
    """Runs `python -m module` with `env` added to the environment, one request at a time."""

    def __init__(self, module: str, env: dict[str, str], setup_timeout_s: float = 600.0) -> None:
        self.module = module
        self.env = env
        self.setup_timeout_s = setup_timeout_s
        self.starts = 0  # how many child processes this sandbox has started
        # A forked copy of this object (a process pool forked from the worker) must not kill
        # the original's child: only the process that started it may.
        self._owner = os.getpid()
        self._proc: subprocess.Popen[bytes] | None = None
        self._requests: Connection | None = None
        self._replies: Connection | None = None
        # The child's stdout and stderr, read back when it dies; lives as long as the sandbox.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115

    def request(self, message: Any, timeout_s: float) -> Exchange:
        """Send `message` and collect the replies until `result`, the deadline or a crash."""
        exchange = Exchange()
        if os.getpid() != self._owner:
            self._forget()
        try:
            self._ensure_started()
            assert self._requests is not None and self._replies is not None
            self._stderr.seek(0)
            self._stderr.truncate()
            self._requests.send(message)
            deadline = time.perf_counter() + self.setup_timeout_s
            while True:
                if not self._replies.poll(max(0.0, deadline - time.perf_counter())):
                    exchange.timed_out = True
                    self.close()
                    exchange.stderr = self._stderr_tail()
                    break
                reply = self._replies.recv()
                exchange.replies.append(reply)
                if reply[0] == "ready":
                    deadline = time.perf_counter() + timeout_s
                elif reply[0] == "result":
                    break
        except (EOFError, OSError):  # the child died (or its pipe broke) mid-request
            exchange.exit_code = self._reap()
            self.close()
            exchange.stderr = self._stderr_tail()
        return exchange

    def close(self) -> None:
        """Kill the child, if any; the next request starts a new one."""
        if os.getpid() != self._owner:
            self._forget()
            return
        if self._proc is not None:
            if self._proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
            self._proc = None
        for conn in (self._requests, self._replies):
            if conn is not None:
                conn.close()
        self._requests = self._replies = None

    def _forget(self) -> None:
        """In a forked copy: let go of the original's child (without killing it)."""
        for conn in (self._requests, self._replies):
            if conn is not None:
                conn.close()  # this process's copies of the pipe ends only
        self._proc = self._requests = self._replies = None
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self._owner = os.getpid()

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self.close()
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        env = child_environment(self.env)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", self.module, str(request_r), str(reply_w)],
                pass_fds=(request_r, reply_w),
                stdin=subprocess.DEVNULL,
                stdout=self._stderr,  # a kernel's printf must not reach the worker's stdout
                stderr=self._stderr,
                env=env,
                start_new_session=True,  # a process group of its own, killed as a whole
            )
        except OSError:
            os.close(request_w)
            os.close(reply_r)
            raise
        finally:
            os.close(request_r)
            os.close(reply_w)
        self._requests = Connection(request_w, readable=False)
        self._replies = Connection(reply_r, writable=False)
        self.starts += 1

    def _reap(self) -> int | None:
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def _stderr_tail(self) -> str:
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - STDERR_TAIL_CHARS))
        return self._stderr.read().decode(errors="replace")

    def __del__(self) -> None:
        # Not contextlib.suppress: at interpreter exit the module's globals may be gone.
        try:  # noqa: SIM105
            self.close()
        except Exception:
            pass


def child_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a `python -m tunehub...` child, with `extra` set."""
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_IMPORT_ROOT, env.get("PYTHONPATH")]))
    return env
