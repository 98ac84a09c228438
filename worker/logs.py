"""Where tunehub's processes log, and how much: `TUNEHUB_LOG_LEVEL` (a level's name or
number), else the process's own default. One rule for every process (the CLI, the API, the
tuner and worker daemons), and an environment variable so that the children `tunehub
standalone` starts follow the level the user gave it (`tunehub -v standalone`)."""

from __future__ import annotations

import logging
import os

LEVEL_ENV = "TUNEHUB_LOG_LEVEL"
FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def log_level(default: int) -> int:
    """The level `TUNEHUB_LOG_LEVEL` names, else `default`; ValueError for a name that is no
    level."""
    text = os.environ.get(LEVEL_ENV, "").strip()
    if not text:
        return default
    if text.isdigit():
        return int(text)
    level = logging.getLevelNamesMapping().get(text.upper())
    if level is None:
        names = ", ".join(n.lower() for n in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))
        raise ValueError(f"{LEVEL_ENV}={text!r} is not a log level (one of {names})")
    return level


def configure(default: int = logging.INFO) -> None:
    """Log to stderr at `log_level(default)`; the first call of a process wins, as with
    `logging.basicConfig`, except for the level, which a later call may change."""
    level = log_level(default)
    logging.basicConfig(level=level, format=FORMAT)
    logging.getLogger().setLevel(level)
