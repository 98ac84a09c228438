"""The API as a real process (`tunehub api` or uvicorn's own command line) on a loopback port,
for the tests that need real sockets: several processes sharing Redis, what a bind refuses,
a restart while clients wait."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

from tests.cli_process import tunehub_argv
from tests.service.redis_server import free_port
from tests.service.workers import ROOT

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def api_env(home: Path, database_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of an API process on this database and Redis (TUNEHUB_* `extra`)."""
    return {
        **os.environ,
        "TUNEHUB_HOME": str(home),
        "TUNEHUB_DATABASE_URL": database_url,
        "TUNEHUB_REDIS_URL": redis_url,
        "PYTHONUNBUFFERED": "1",
        **{f"TUNEHUB_{name.upper()}": value for name, value in extra.items()},
    }


def tunehub_api(port: int, *args: str) -> list[str]:
    """`tunehub api --port PORT ARGS`."""
    return tunehub_argv("api", "--port", port, *args)


def uvicorn_factory(port: int, host: str = "127.0.0.1", *args: str) -> list[str]:
    """`uvicorn tunehub.server.app:create_app --factory --host HOST --port PORT ARGS`."""
    return [
        *(sys.executable, "-m", "uvicorn", "tunehub.server.app:create_app", "--factory"),
        *("--host", host, "--port", str(port), *args),
    ]


class ApiProcess:
    """One API process: `start` returns once it answers `/readyz` (or raises with its log)."""

    def __init__(
        self, command: Sequence[str], env: Mapping[str, str], log: Path, port: int
    ) -> None:
        self.command = list(command)
        self.env = dict(env)
        self.log = log
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def free_port(cls) -> int:
        return free_port()

    def launch(self) -> subprocess.Popen[bytes]:
        """Start it and return at once (`start` also waits until it answers)."""
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.command, cwd=ROOT, env=self.env, stdout=out, stderr=out
            )
        return self.proc

    def start(self) -> Self:
        proc = self.launch()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the API exited ({proc.returncode}):\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the API did not become ready:\n{self.output()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
