"""A private redis-server for tests: its own port, no persistence, gone when the test ends.

Tests never touch a Redis that happens to run on the machine: each server here starts on a free
port with its data directory in a temporary folder, and is stopped afterwards.

    with RedisServer(tmp_path) as server:
        redis = Redis.from_url(server.url)
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

START_TIMEOUT_S = 15.0


def redis_server_binary() -> str | None:
    return shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """`redis-server` on a free local port, data in `directory`; a context manager."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise RuntimeError("redis-server is not on PATH")
        self.directory.mkdir(parents=True, exist_ok=True)
        # The port was free a moment ago; another process may take it first, so try again.
        for _ in range(3):
            self.port = free_port()
            log = self.directory / f"redis-{self.port}.log"
            command = [
                binary,
                *("--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no"),
                *("--dir", str(self.directory), "--logfile", str(log)),
            ]
            self._proc = subprocess.Popen(command, stdin=subprocess.DEVNULL)
            if self._wait_ready():
                return
            self.stop()
        raise RuntimeError(f"redis-server did not start; see {self.directory}")

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def _wait_ready(self) -> bool:
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        client = Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
        try:
            while time.monotonic() < deadline and self._proc.poll() is None:
                try:
                    # Ours, not a server another test started on the same port meanwhile.
                    return int(client.info("server")["process_id"]) == self._proc.pid
                except RedisConnectionError:
                    time.sleep(0.05)
            return False
        finally:
            client.close()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
