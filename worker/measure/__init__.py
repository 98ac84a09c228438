"""Run built kernels in a sandboxed child process: verify their output, time them. The runner
interface and the sandbox live here; each target kind's runner and measuring child live in
its folder (`targets/<kind>/runner.py`, `child.py`)."""

from tunehub.worker.measure.case import Case, CaseCache
from tunehub.worker.measure.runner import MeasureResult, Runner

__all__ = ["Case", "CaseCache", "MeasureResult", "Runner"]
