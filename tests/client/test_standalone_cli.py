"""`tunehub standalone` on a port already taken fails at once, in one line, having started
nothing (no Redis, no database, no logs)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from tests.cli_process import tunehub_argv


def test_a_busy_port_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "TUNEHUB_HOME": str(tmp_path / "home")}
        argv = tunehub_argv("standalone", "--port", port)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: cannot serve at 127.0.0.1:{port}: Address already in use (another tunehub "
        "standalone? --port names another)"
    ]
    assert not (tmp_path / "home" / "logs").exists()
