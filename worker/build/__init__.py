"""Compile lowered kernels into loadable artifacts: the builder interface (`builder`); each
target kind's builder lives in its folder (`targets/<kind>/build.py`)."""

from tunehub.worker.build.builder import Builder, BuildResult

__all__ = ["BuildResult", "Builder"]
