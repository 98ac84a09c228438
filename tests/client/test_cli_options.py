"""The options every command shares: `--version`, `-v/-q` and `TUNEHUB_LOG_LEVEL`."""

from __future__ import annotations

import logging
import os
import subprocess
from importlib.metadata import version

import pytest

from tests.cli_process import run_tunehub, tunehub_argv
from tunehub.worker.logs import LEVEL_ENV, log_level


def test_version() -> None:
    done = run_tunehub("--version")
    assert (done.returncode, done.stdout) == (0, f"tunehub {version('tunehub')}\n")


def test_verbose_and_quiet_set_the_level_children_inherit() -> None:
    assert run_tunehub("-q", "schema").returncode == 0
    both = run_tunehub("-v", "-q", "schema")
    assert both.returncode == 2
    assert both.stderr == "error: -v and -q contradict each other: give one\n"


def test_a_bad_log_level_is_one_line() -> None:
    env = {**os.environ, LEVEL_ENV: "chatty"}
    done = subprocess.run(
        tunehub_argv("schema"), capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {LEVEL_ENV}='chatty' is not a log level")
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "level"),
    [("", logging.INFO), ("debug", logging.DEBUG), ("WARNING", logging.WARNING), ("40", 40)],
)
def test_log_level_names(monkeypatch: pytest.MonkeyPatch, text: str, level: int) -> None:
    monkeypatch.setenv(LEVEL_ENV, text)
    assert log_level(logging.INFO) == level
