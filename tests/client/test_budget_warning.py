"""A trial budget too small for its tasks is said before the tuning spends it: with fewer
than two trials a task (its naive config, then one more), some stay at naive speed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_process import run_tunehub
from tests.signatures import row_matmul


def test_a_budget_below_two_trials_a_task_warns_with_the_number_needed(tmp_path: Path) -> None:
    signature = tmp_path / "sig.json"
    signature.write_text(json.dumps(row_matmul("budget", k=8, n=8, max_m=8)))
    db = f"sqlite:///{tmp_path / 'local.db'}"
    done = run_tunehub(
        "tune", signature, "--symbol", "M=1,2,3", "--trials", 2, "--json", "--db", db
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (
        "warning: 2 trials over 3 tasks leave some at their naive schedule, 1 never tried: "
        "--trials 6 or more tries one schedule beyond it in each"
    )
    assert json.loads(done.stdout)["total_trials"] == 2
