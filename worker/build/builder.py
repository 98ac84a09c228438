"""The build interface: kernel source in, loadable artifact (or a failure with its log) out.

One builder per toolchain (gcc for CPUs here, nvcc for CUDA beside it); the job functions
pick one by target kind and never look inside.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunehub.compiler.kernel import Kernel
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import Target

# Compiler logs are kept in records: enough to see the error, not a 10 MB template dump.
MAX_LOG_CHARS = 16_000


@dataclass(frozen=True)
class BuildResult:
    """`status` is OK, COMPILE_ERROR or COMPILE_TIMEOUT; `log` holds the compiler's output
    either way (warnings on success), truncated to MAX_LOG_CHARS."""

    status: RecordStatus
    build_time_s: float
    log: str = ""
    artifact: bytes | None = None
    sha256: str | None = None
    # Toolchain facts worth keeping with the record: command line, artifact size; for CUDA,
    # registers and shared memory per kernel.
    stats: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def success(
        cls, artifact: bytes, build_time_s: float, log: str, stats: dict[str, Any]
    ) -> BuildResult:
        return cls(
            RecordStatus.OK,
            build_time_s,
            truncate(log),
            artifact,
            hashlib.sha256(artifact).hexdigest(),
            stats,
        )


def truncate(log: str, limit: int = MAX_LOG_CHARS) -> str:
    """Head and tail of a long log: the first error and the final summary both survive."""
    if len(log) <= limit:
        return log
    half = limit // 2
    return f"{log[:half]}\n... [{len(log) - 2 * half} characters cut] ...\n{log[-half:]}"


class Builder(ABC):
    @abstractmethod
    def build(self, kernel: Kernel, target: Target, timeout_s: float) -> BuildResult:
        """Compile `kernel` for `target`, giving up after `timeout_s` seconds of wall time."""


def run_compiler(command: list[str], timeout_s: float, cwd: str) -> tuple[RecordStatus, str]:
    """Run a compiler in its own process group, so a timeout kills its children (cc1, as,
    ptxas) too. Every builder compiles through this: one timeout and log policy."""
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        return RecordStatus.COMPILE_ERROR, f"cannot run {command[0]}: {exc}"
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        log = out.decode(errors="replace")
        return RecordStatus.COMPILE_TIMEOUT, f"{command[0]} timed out after {timeout_s:g} s\n{log}"
    log = out.decode(errors="replace")
    if proc.returncode != 0:
        return RecordStatus.COMPILE_ERROR, f"{command[0]} exited with {proc.returncode}\n{log}"
    return RecordStatus.OK, log


def build_shared_library(
    source: str,
    filename: str,
    command: Sequence[str],
    timeout_s: float,
    stats: dict[str, Any],
    libraries: Sequence[str] = (),
) -> BuildResult:
    """Compile `source` into a shared library, the artifact: written as `filename` in a fresh
    folder and compiled there with relative paths, so logs read `kernel.c:12:5: error: ...`.
    `command` is the compiler and its flags; `libraries` go after the source file."""
    with tempfile.TemporaryDirectory(prefix="tunehub-build-") as tmp:
        Path(tmp, filename).write_text(source)
        start = time.perf_counter()
        status, log = run_compiler(
            [*command, "-o", "kernel.so", filename, *libraries], timeout_s, cwd=tmp
        )
        elapsed = time.perf_counter() - start
        if status is not RecordStatus.OK:
            return BuildResult(status, elapsed, truncate(log))
        artifact = Path(tmp, "kernel.so").read_bytes()
    return BuildResult.success(artifact, elapsed, log, {**stats, "artifact_bytes": len(artifact)})
