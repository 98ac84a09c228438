"""`scripts/bootstrap` installs with apt-get waiting for another apt-get's dpkg lock (two
checkouts bootstrapping at once) instead of failing at once."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.faults.conftest import ROOT

BOOTSTRAP = ROOT / "scripts" / "bootstrap"


def test_every_apt_get_of_bootstrap_waits_for_the_dpkg_lock(tmp_path: Path) -> None:
    fake = tmp_path / "apt-get"
    fake.write_text('#!/bin/sh\necho "$@" >> "$APT_CALLS"\n')
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    # The script's own function, run with an apt-get that records its arguments.
    script = f'eval "$(sed -n "/^apt_install()/,/^}}/p" {BOOTSTRAP})"; apt_install redis-server'
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "APT_CALLS": str(calls)}
    subprocess.run(["bash", "-c", script], env=env, check=True)
    lines = calls.read_text().splitlines()
    assert [line.split()[-1] for line in lines] == ["-qq", "redis-server"]
    assert all("DPkg::Lock::Timeout=600" in line for line in lines)
    # No apt-get call of the script goes around the function.
    commands = re.findall(r"(?:^\s*|&&\s*)(apt-get\s+\S+)", BOOTSTRAP.read_text(), re.M)
    assert commands == ['apt-get "${wait[@]}"'] * 2
