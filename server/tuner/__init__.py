"""The tuner (the search loop of one tuning) and the executors that run its candidates."""

from tunehub.server.tuner.executor import Executor, LocalExecutor
from tunehub.server.tuner.registration import (
    SearchPlan,
    ValidTask,
    register_tuning,
    resolve_symbols,
    validate_task,
)
from tunehub.server.tuner.reporting import Best, Progress, TuningSummary, summarize
from tunehub.server.tuner.scheduler import TaskScheduler
from tunehub.server.tuner.tuner import Tuner

__all__ = [
    "Best",
    "Executor",
    "LocalExecutor",
    "Progress",
    "SearchPlan",
    "TaskScheduler",
    "Tuner",
    "TuningSummary",
    "ValidTask",
    "register_tuning",
    "resolve_symbols",
    "summarize",
    "validate_task",
]
