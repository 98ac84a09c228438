"""How the dashboard writes numbers and configs: short, with units, the same on every page."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

# An error log shown in a records table: its first lines, enough to see what failed.
EXCERPT_LINES = 12
EXCERPT_CHARS = 1200


def latency(seconds: float | None) -> str:
    """`12.3 µs`, `4.56 ms`, `1.20 s`; an em dash for none."""
    if seconds is None:
        return "—"
    for scale, unit in ((1e-6, "ns"), (1e-3, "µs"), (1.0, "ms")):
        if seconds < scale:
            return f"{seconds / scale * 1e3:.3g} {unit}"
    return f"{seconds:.3g} s"


def duration(seconds: float) -> str:
    """`42 s`, `3m 05s`, `2h 01m`: elapsed and wall time."""
    whole = round(seconds)
    if whole < 60:
        return f"{seconds:.3g} s" if seconds < 10 else f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def timestamp(moment: datetime | None) -> str:
    """UTC, to the second: the service's clock, whatever the browser's zone."""
    return "—" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def config(values: Mapping[str, Any]) -> str:
    """`s0.mr=8 s0.nr=16 ...` in key order: a config on one line."""
    return " ".join(f"{key}={values[key]}" for key in sorted(values))


def symbols(values: Mapping[str, Any]) -> str:
    """`M=128, N=64`, or an em dash for a workload without symbols."""
    return ", ".join(f"{key}={value}" for key, value in sorted(values.items())) or "—"


def excerpt(log: str | None) -> str:
    """The first lines of an error log."""
    if not log:
        return ""
    lines = log.splitlines()
    text = "\n".join(lines[:EXCERPT_LINES])
    if len(text) > EXCERPT_CHARS:
        text = text[: EXCERPT_CHARS - 1] + "…"
    elif len(lines) > EXCERPT_LINES:
        text += f"\n… ({len(lines) - EXCERPT_LINES} more lines)"
    return text
