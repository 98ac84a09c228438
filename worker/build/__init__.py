"""Compile lowered kernels into loadable artifacts."""

from worker.build.builder import Builder, BuildResult
from worker.build.cpu import CpuBuilder

__all__ = ["BuildResult", "Builder", "CpuBuilder"]
