"""Fault injection on real processes: a private redis-server that a test SIGKILLs and starts
again on the same port, and `tunehub api`, `tunehub tuner` and `tunehub worker` daemons, each
its own process with its output in a log file, started and killed at will."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis
from redis.exceptions import RedisError

# The in-process app on a migrated database (SQLite and PostgreSQL) with a private Redis: the
# API tests' fixtures, for the faults that need no daemon.
from tests.api.conftest import client, make_client, redis_url, settings  # noqa: F401
from tests.service.redis_server import free_port, redis_server_binary
from tests.signatures import row_matmul
from tunehub.server.tuner.service import living_tuners
from tunehub.worker.registry import list_workers

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0
# A small task whose candidates build in about a second.
TASK = row_matmul("faults_matmul", k=16, n=24, max_m=64)


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = START_TIMEOUT_S) -> Any:
    """Poll `condition` until it returns something true; that value."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


class Redises:
    """One redis-server on a fixed port, that can be SIGKILLed and started again there."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = redis_server_binary()
        assert binary is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                binary,
                *("--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--dir", str(self.directory)),
                *("--logfile", str(self.directory / "redis.log")),
            ],
            stdin=subprocess.DEVNULL,
        )
        probe = Redis.from_url(self.url, socket_connect_timeout=1)

        def ours() -> bool:
            try:
                return int(probe.info("server")["process_id"]) == self.proc.pid  # type: ignore[union-attr]
            except RedisError:
                return False

        try:
            wait_for(ours, "redis-server")
        finally:
            probe.close()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


class Daemon:
    """One daemon process of the service."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.log = name, log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        self.proc.send_signal(sig)
        self.proc.wait(timeout=30)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Service:
    """The daemons of one test, on one Redis and one database."""

    def __init__(self, home: Path, redis: Redises, database_url: str) -> None:
        self.home, self.redis, self.database_url = home, redis, database_url
        self.daemons: list[Daemon] = []
        self.api_url = ""
        self.env = {
            **os.environ,
            "TUNEHUB_HOME": str(home),
            "TUNEHUB_DATABASE_URL": database_url,
            "TUNEHUB_REDIS_URL": redis.url,
            "PYTHONUNBUFFERED": "1",
        }

    def _start(self, name: str, *args: str) -> Daemon:
        log = self.home / f"{name}.log"
        daemon = Daemon(name, [sys.executable, *args], self.env, log)
        self.daemons.append(daemon)
        return daemon

    def api(self) -> Daemon:
        port = free_port()
        self.api_url = f"http://127.0.0.1:{port}"
        return self._start(
            "api",
            *("-m", "uvicorn", "tunehub.server.app:create_app", "--factory"),
            *("--host", "127.0.0.1", "--port", str(port), "--no-access-log"),
        )

    def tuner(self, name: str) -> Daemon:
        args = ("-m", "tunehub.server.tuner.service", "--redis", self.redis.url, "--name", name)
        return self._start(name, *args)

    def worker(self, name: str) -> Daemon:
        args = ("-m", "tunehub.worker.daemon", "--redis", self.redis.url, "--name", name)
        return self._start(name, *args, "--threads", "1")

    def wait_api(self) -> None:
        def ready() -> bool:
            try:
                return httpx.get(f"{self.api_url}/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, "the API")

    def wait_registered(self, *names: str) -> None:
        with Redis.from_url(self.redis.url) as redis:

            def registered() -> bool:
                known = {w.name for w in list_workers(redis)} | set(living_tuners(redis))
                return set(names) <= known

            wait_for(registered, f"{', '.join(names)} to register")

    def start_all(self) -> None:
        """The API, a tuner (`tuner-1`) and a worker (`w1`), each ready."""
        self.api()
        self.tuner("tuner-1")
        self.worker("w1")
        self.wait_api()
        self.wait_registered("tuner-1", "w1")

    def stop(self) -> None:
        for daemon in self.daemons:
            if daemon.alive():
                daemon.proc.terminate()
        for daemon in self.daemons:
            try:
                daemon.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                daemon.proc.kill()
                daemon.proc.wait()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Redises]:
    if redis_server_binary() is None:
        pytest.fail("redis-server is not on PATH: the fault tests need it")
    server = Redises(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def service(tmp_path: Path, redis_server: Redises, database_url: str) -> Iterator[Service]:
    """Nothing started yet: each test starts the daemons it needs (all stopped afterwards)."""
    from tunehub.server.db.session import migrate

    migrate(database_url)
    running = Service(tmp_path, redis_server, database_url)
    yield running
    running.stop()


def submit(api_url: str, trials: int, **body: Any) -> dict[str, Any]:
    request = {"task": TASK, "target": "cpu", "trials": trials, "strategy": "random", **body}
    response = httpx.post(f"{api_url}/v1/tunings", json=request, timeout=30)
    assert response.status_code in (200, 202), response.text
    answer: dict[str, Any] = response.json()
    return answer


# Room for a test's database, and little more: a full disk is quick to make.
DISK_BYTES = 16 * 1024 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_BYTES mounted in `tmp_path` (skipped where mounting is not allowed)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or 'not allowed'}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until `disk` has no space left; the file."""
    filler = disk / "filler"
    with filler.open("wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    return filler
