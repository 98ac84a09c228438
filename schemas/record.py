"""Statuses of measured candidates, shared by workers, the tuner and clients."""

from __future__ import annotations

from enum import StrEnum

# The device of a record whose fingerprint does not name one (records older than the field).
UNKNOWN_DEVICE = "unknown"


class RecordStatus(StrEnum):
    """Outcome of one candidate. Only `ok` records can ever be the best."""

    OK = "ok"
    INVALID_CONFIG = "invalid_config"
    COMPILE_ERROR = "compile_error"
    COMPILE_TIMEOUT = "compile_timeout"
    RUNTIME_ERROR = "runtime_error"
    RUN_TIMEOUT = "run_timeout"
    WRONG_ANSWER = "wrong_answer"


class TuningStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
