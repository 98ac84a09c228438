"""The whole service on one machine (`tunehub standalone`, `tunehub demo`, the end-to-end
tests and the API benchmark): a private redis-server (unless given a Redis URL), the API under
uvicorn, the tuner daemon and local worker daemons, each a child process.

    with Stack(StackConfig(home=..., database_url=...)) as stack:
        Client(stack.url).submit(...)

Each child runs in a session of its own with its output in a log file (`<home>/logs`), so
the terminal's Ctrl-C reaches only this process, which then stops the children in order:
daemons first (the tuner's job, then the workers'), the API, Redis last. Stopping escalates
from SIGTERM (a daemon's warm shutdown) to a second SIGTERM (RQ's cold shutdown, which kills
the tuning in progress) to SIGKILL, and ends by killing whatever is left in each child's
session (an RQ work horse, a measuring child), so nothing outlives the stack. Children also
get SIGTERM if this process dies without stopping them (Linux's parent-death signal).

The tuner hands a tuning in progress back to the queue when it stops; the queue is the
database, so the next stack on the same database resumes it from its records.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Self

import httpx
from redis import Redis
from redis.exceptions import RedisError

from tunehub.server.db.session import migrate
from tunehub.server.tuner.service import living_tuners
from tunehub.worker.registry import list_workers

READY_TIMEOUT_S = 60.0
# Each stop step waits this long before escalating; over a second, because RQ ignores a
# second signal that follows the first within one second.
STOP_GRACE_S = 3.0
PR_SET_PDEATHSIG = 1


class StackError(RuntimeError):
    """A process of the stack could not start, or died."""


@dataclass(frozen=True)
class StackConfig:
    """What to run. `port` 0 picks a free port; `redis_url` None starts a private Redis."""

    home: Path
    database_url: str
    redis_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    workers: int = 1
    worker_threads: int | None = None
    # Processes of the API (uvicorn's `--workers`): they share the port and, through Redis,
    # the best kernels' generations.
    api_workers: int = 1
    tuner: bool = True
    # Extra environment of every child (e.g. TUNEHUB_AUTH=token for the API).
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"


class ManagedProcess:
    """One child: its command, its log file, and a stop that leaves nothing behind."""

    def __init__(self, name: str, command: list[str], log: Path, cwd: Path | None = None) -> None:
        self.name = name
        self.command = command
        self.log = log
        # `python -m` and uvicorn put the working directory first on `sys.path`: children
        # run in a directory of the stack's own, so that a stray `rq.py` wherever the user
        # happens to stand cannot shadow a real module.
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was not started"
        return self.proc.pid

    def start(self, env: Mapping[str, str]) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.command,
                cwd=self.cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def wait(self, timeout_s: float) -> bool:
        """Whether it ended within `timeout_s`."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False

    def kill_session(self) -> None:
        """SIGKILL the process and everything left in its session (it is the session's
        leader: its session id is its pid), then reap it."""
        if self.proc is None:
            return
        for pid in [self.proc.pid, *session_members(self.proc.pid)]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()

    def tail(self, chars: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def stop_all(processes: list[ManagedProcess], grace_s: float = STOP_GRACE_S) -> None:
    """Stop `processes` together: SIGTERM, a second SIGTERM, then SIGKILL for those still
    running after `grace_s` each; finally sweep their sessions."""
    for sig in (signal.SIGTERM, signal.SIGTERM):
        running = [p for p in processes if p.alive()]
        for p in running:
            p.signal(sig)
        deadline = time.monotonic() + grace_s
        for p in running:
            p.wait(max(0.0, deadline - time.monotonic()))
    for p in processes:
        p.kill_session()


class Stack:
    """The service's processes for `config`; a context manager that starts and stops them."""

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.redis_url = config.redis_url or ""
        self.port = config.port
        self.redis: ManagedProcess | None = None
        self.api: ManagedProcess | None = None
        self.tuner: ManagedProcess | None = None
        self.workers: list[ManagedProcess] = []
        # Names of this stack's daemons: unique, since a shared Redis may serve other stacks.
        self._tag = uuid.uuid4().hex[:6]

    @property
    def url(self) -> str:
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        return f"http://{host}:{self.port}"

    @property
    def private_redis(self) -> bool:
        return self.config.redis_url is None

    @property
    def processes(self) -> list[ManagedProcess]:
        started = [self.redis, self.api, self.tuner, *self.workers]
        return [p for p in started if p is not None]

    def start(self) -> None:
        """Start every process and return once each one answers (StackError otherwise; what
        was started is stopped again)."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        config = self.config
        config.log_dir.mkdir(parents=True, exist_ok=True)
        if self.private_redis:
            self._start_redis()
        # Migrated here, once: the API and the tuner both migrate on start, and two
        # migrations racing on a fresh database would collide.
        migrate(config.database_url)
        env = self._env()
        self.port = config.port or free_port(config.host)
        self.api = self._process(
            "api",
            "-m",
            "uvicorn",
            "tunehub.server.app:create_app",
            "--factory",
            *("--host", config.host, "--port", str(self.port)),
            *("--workers", str(config.api_workers)),
            "--no-access-log",
        )
        self.api.start(env)
        if config.tuner:
            self.tuner = self._process(
                "tuner",
                *("-m", "tunehub.server.tuner.service", "--redis", self.redis_url),
                *("--name", self._name("tuner")),
            )
            self.tuner.start(env)
        self._start_workers(config.workers, env)
        self._wait_ready()

    def _start_workers(self, count: int, env: Mapping[str, str]) -> None:
        threads = self.config.worker_threads
        args = ["--threads", str(threads)] if threads else []
        for _ in range(count):
            role = f"worker-{len(self.workers) + 1}"
            worker = self._process(
                role,
                *("-m", "tunehub.worker.daemon", "--redis", self.redis_url),
                *("--name", self._name(role), *args),
            )
            worker.start(env)
            self.workers.append(worker)

    def stop(self) -> None:
        """Stop every process (daemons, then the API, then Redis); nothing is left running.
        A second Ctrl-C (or SIGTERM) while it runs is ignored: it must finish to leave no
        process behind, and it takes seconds at most."""
        with _signals_ignored():
            stop_all([p for p in (self.tuner, *self.workers) if p is not None])
            stop_all([p for p in (self.api,) if p is not None])
            stop_all([p for p in (self.redis,) if p is not None])

    def check(self) -> None:
        """Raise StackError, with its log's tail, if any process has died."""
        for process in self.processes:
            if not process.alive():
                code = process.proc.returncode if process.proc else None
                raise StackError(
                    f"{process.name} exited with status {code}; the end of {process.log}:\n"
                    f"{process.tail()}"
                )

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # Starting

    def _start_redis(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise StackError(
                "redis-server is not on PATH: install it (apt-get install redis-server) "
                "or pass the URL of a running Redis"
            )
        data = self.config.home / "redis"
        data.mkdir(parents=True, exist_ok=True)
        # A free port can be taken between the check and the bind: try a few.
        for _ in range(3):
            port = free_port("127.0.0.1")
            self.redis = redis_process = ManagedProcess(
                "redis",
                [
                    binary,
                    *("--port", str(port), "--bind", "127.0.0.1"),
                    *("--save", "", "--appendonly", "no", "--dir", str(data)),
                ],
                self.config.log_dir / "redis.log",
            )
            redis_process.start(os.environ)
            self.redis_url = f"redis://127.0.0.1:{port}/0"
            with Redis.from_url(self.redis_url, socket_connect_timeout=1) as redis:
                deadline = time.monotonic() + READY_TIMEOUT_S
                with contextlib.suppress(StackError):  # its port was taken: another one
                    ours = functools.partial(_pings, redis, redis_process.pid)
                    self._until(deadline, "redis-server", ours, [redis_process])
                    return
            stop_all([redis_process])
        raise StackError(f"redis-server did not start; see {self.config.log_dir / 'redis.log'}")

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            **self.config.env,
            "TUNEHUB_HOME": str(self.config.home),
            "TUNEHUB_DATABASE_URL": self.config.database_url,
            "TUNEHUB_REDIS_URL": self.redis_url,
            "PYTHONUNBUFFERED": "1",
        }

    def _process(self, name: str, *args: str) -> ManagedProcess:
        log = self.config.log_dir / f"{name}.log"
        return ManagedProcess(name, [sys.executable, *args], log, cwd=self.config.home)

    def _name(self, role: str) -> str:
        return f"standalone-{self._tag}-{role}"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        with httpx.Client(base_url=self.url, timeout=2.0) as http:
            self._until(deadline, "the API", lambda: _answers(http))
        with Redis.from_url(self.redis_url) as redis:
            if self.tuner is not None:
                name = self._name("tuner")

                def tuner_registered() -> bool:
                    return name in living_tuners(redis)

                self._until(deadline, "the tuner", tuner_registered)
            self._until(deadline, "the workers to register", lambda: self._workers_ready(redis))

    def _workers_ready(self, redis: Redis) -> bool:
        names = {w.name for w in list_workers(redis)}
        return all(self._name(w.name) in names for w in self.workers)

    def _until(
        self,
        deadline: float,
        what: str,
        ready: Callable[[], bool],
        processes: list[ManagedProcess] | None = None,
    ) -> None:
        """Poll `ready` until it holds; StackError if a process dies or time runs out."""
        while not ready():
            for process in processes or self.processes:
                if not process.alive():
                    self.check()
            if time.monotonic() > deadline:
                raise StackError(f"timed out waiting for {what}; logs in {self.config.log_dir}")
            time.sleep(0.1)


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise KeyboardInterrupt, so that `kill` stops a
    stack as cleanly as Ctrl-C does. SIGINT is set explicitly too: a process started in the
    background by a shell inherits SIGINT ignored, and Python then installs no handler."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """SIGINT and SIGTERM ignored within the block (only the main thread can set handlers;
    elsewhere the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def session_members(sid: int) -> list[int]:
    """The pids of the processes in session `sid` (from /proc; none where there is no /proc)."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # `pid (comm) state ppid pgrp session ...`; comm may itself contain spaces and ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[3]) == sid and int(entry.name) != sid:
            members.append(int(entry.name))
    return members


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux for SIGTERM when the parent dies."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _pings(redis: Redis, pid: int) -> bool:
    """Whether the redis-server of process `pid` answers: a server another process started on
    the same port in the meantime does not count."""
    try:
        return int(redis.info("server")["process_id"]) == pid
    except RedisError:
        return False


def _answers(http: httpx.Client) -> bool:
    try:
        return http.get("/readyz").status_code == 200
    except httpx.TransportError:
        return False
