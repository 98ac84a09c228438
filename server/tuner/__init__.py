"""The tuner (the search loop of one tuning) and the executors that run its candidates."""

from tunehub.server.tuner.executor import Executor, LocalExecutor
from tunehub.server.tuner.registration import register_tuning, resolve_symbols
from tunehub.server.tuner.reporting import Best, Progress, TuningSummary, summarize
from tunehub.server.tuner.scheduler import TaskScheduler
from tunehub.server.tuner.tuner import Tuner

__all__ = [
    "Best",
    "Executor",
    "LocalExecutor",
    "Progress",
    "TaskScheduler",
    "Tuner",
    "TuningSummary",
    "register_tuning",
    "resolve_symbols",
    "summarize",
]
