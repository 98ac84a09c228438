"""The tuner (the search loop of one tuning) and the executors that run its candidates."""

from server.tuner.executor import Executor, LocalExecutor
from server.tuner.scheduler import TaskScheduler
from server.tuner.tuner import (
    Best,
    Progress,
    Tuner,
    TuningSummary,
    resolve_symbols,
    submit,
    summarize,
)

__all__ = [
    "Best",
    "Executor",
    "LocalExecutor",
    "Progress",
    "TaskScheduler",
    "Tuner",
    "TuningSummary",
    "resolve_symbols",
    "submit",
    "summarize",
]
