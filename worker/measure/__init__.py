"""Run built kernels in a sandboxed child process: verify their output, time them."""

from worker.measure.case import Case, CaseCache
from worker.measure.cpu import CpuRunner
from worker.measure.runner import MeasureResult, Runner

__all__ = ["Case", "CaseCache", "CpuRunner", "MeasureResult", "Runner"]
