"""The runner shape every device shares: candidates run in one persistent sandboxed child.

A runner writes the artifact to a file named by its content, sends its child a `Request`,
and turns the exchange into a `MeasureResult` that says how far the kernel got before it
failed. Subclasses name only their child module, the backend the child loads the artifact
with, the artifact's file suffix and the child's environment.
"""

from __future__ import annotations

import hashlib
import os
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tunehub.compiler.verify import reduce_extent
from tunehub.schemas.record import RecordStatus
from tunehub.worker.measure.case import Case
from tunehub.worker.measure.runner import MeasureResult, Runner
from tunehub.worker.measure.sandbox import Exchange, Sandbox


@dataclass(frozen=True)
class Request:
    """What a runner sends its child for one candidate."""

    backend: str  # how the child loads `artifact`: "cpu" (.so), "gpu" (cubin), "emulated"
    artifact: str  # path of the built artifact
    metadata: dict[str, Any]  # Kernel.metadata(): entry, args, symbols, launch
    case: Case
    reduce_extents: dict[str, int]  # per output: terms each element sums, for the tolerance
    repeats: int
    min_repeat_s: float
    timeout_s: float


class SandboxedRunner(Runner):
    """Runs candidates in one persistent child process (`child`, a module run with -m).

    The child keeps the current test case in memory, so consecutive candidates of one
    workload pay only for their own runs; it is replaced after any candidate that failed.
    """

    child: ClassVar[str]
    backend: ClassVar[str]
    suffix: ClassVar[str]

    def __init__(self, env: dict[str, str]) -> None:
        self.sandbox = Sandbox(self.child, env)

    def run(
        self,
        artifact: bytes,
        metadata: dict[str, Any],
        case: Case,
        *,
        timeout_s: float,
        repeats: int,
        min_repeat_s: float,
    ) -> MeasureResult:
        # Named by content: dlopen hands out an already loaded library of the same path.
        digest = hashlib.sha256(artifact).hexdigest()
        path = Path(tempfile.gettempdir(), f"tunehub-{os.getpid()}-{digest}{self.suffix}")
        path.write_bytes(artifact)
        extents = {n: reduce_extent(case.program, n, case.symbols) for n in case.program.outputs}
        request = Request(
            backend=self.backend,
            artifact=str(path),
            metadata=metadata,
            case=case,
            reduce_extents=extents,
            repeats=repeats,
            min_repeat_s=min_repeat_s,
            timeout_s=timeout_s,
        )
        try:
            exchange = self.sandbox.request(request, timeout_s)
        finally:
            path.unlink(missing_ok=True)
        result = interpret(exchange, timeout_s)
        if result.status is not RecordStatus.OK:
            self.sandbox.close()
        return result

    def close(self) -> None:
        self.sandbox.close()


def interpret(exchange: Exchange, timeout_s: float) -> MeasureResult:
    """The result of an exchange, saying how far a kernel got before it failed."""
    result = exchange.reply("result")
    if result is not None:
        return result[1]
    checked = exchange.reply("checked")
    max_error = checked[1] if checked else None
    if exchange.reply("ready") is None:
        stage = "before the kernel was loaded (child start-up or test case)"
    elif checked is None:
        stage = "during the first (checked) run"
    else:
        stage = f"during the timed runs (output verified; first call took {checked[2]:.3g} s)"
    if exchange.timed_out:
        limit = f"{timeout_s:g} s" if exchange.reply("ready") else "the set-up time limit"
        log = f"timed out after {limit} {stage}"
        status = RecordStatus.RUN_TIMEOUT
    else:
        log = f"measuring process {_death(exchange.exit_code)} {stage}"
        status = RecordStatus.RUNTIME_ERROR
    if exchange.stderr.strip():
        log += f"\n--- stderr (tail) ---\n{exchange.stderr}"
    return MeasureResult(status, log=log, max_error=max_error)


def _death(exit_code: int | None) -> str:
    if exit_code is None:
        return "was lost"
    if exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
        return f"was killed by {name}"
    return f"exited with status {exit_code}"
