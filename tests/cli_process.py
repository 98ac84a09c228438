"""The `tunehub` CLI run as a process, as a user runs it, for the tests that read its exit
status and what it prints. It runs `client.cli.main` under this interpreter, so it needs no
installed console script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def tunehub_argv(*args: str | Path | int) -> list[str]:
    """The command line of `tunehub ARGS`."""
    return [sys.executable, "-c", "from tunehub.client.cli import main; main()", *map(str, args)]


def run_tunehub(*args: str | Path | int, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`tunehub ARGS` run to its end, its output captured as text."""
    return subprocess.run(tunehub_argv(*args), capture_output=True, text=True, timeout=timeout)
