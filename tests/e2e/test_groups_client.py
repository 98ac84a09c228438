"""Tuning groups from the client side, against the end-to-end service: the SDK's group calls
and `tunehub submit A.json B.json` / `tunehub status --group`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.cli_process import run_tunehub
from tests.e2e.conftest import Service
from tunehub.client.errors import ApiError, NotFoundError, TuningTimeout
from tunehub.client.sdk import Client
from tunehub.schemas.api import GroupTask
from tunehub.schemas.record import TuningStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.taskset import Flops, Task, TaskSet

# Two tasks, a batch each (the service's tuner batches 8 with the fixture's two workers).
TRIALS = 16
TIMEOUT_S = 240


def task(name: str, scale: float) -> TaskSignature:
    """A small task of its own (the service's database is shared by every end-to-end test,
    and a workload tuned before would be answered from it)."""
    return TaskSignature.model_validate(
        {
            "name": name,
            "inputs": [{"name": "X", "shape": [48, 40], "dtype": "float32"}],
            "computes": [
                {
                    "name": "Y",
                    "axes": ["i", "j"],
                    "shape": [48, 40],
                    "dtype": "float32",
                    "expr": f"tanh(X[i, j]) * {scale}",
                }
            ],
            "outputs": ["Y"],
        }
    )


def tunehub(service: Service, *args: str) -> subprocess.CompletedProcess[str]:
    return run_tunehub(*args, "--server", service.url, timeout=TIMEOUT_S)


def test_a_group_shares_its_budget_and_is_followed_like_a_tuning(client: Client) -> None:
    tasks = [GroupTask(task=task("sdk_a", 2.0), weight=3), GroupTask(task=task("sdk_b", 3.0))]
    submitted = client.submit_group(tasks, target="cpu", trials=TRIALS)
    assert submitted.trials_total == TRIALS and submitted.weights == [3.0, 1.0]
    assert len(submitted.tunings) == 2
    with pytest.raises(TuningTimeout, match=f"tuning group {submitted.id} is still"):
        client.wait_group(submitted.id, timeout_s=0.01)

    seen: list[int] = []
    group = client.wait_group(
        submitted.id, timeout_s=TIMEOUT_S, on_progress=lambda g: seen.append(g.trials_done)
    )
    assert group.status == TuningStatus.DONE, group.error
    assert seen == sorted(seen) and seen[-1] == group.trials_done
    assert 0 < group.trials_done <= TRIALS
    assert group.trials_done == sum(t.trials_done for t in group.tunings)
    assert [t.id for t in group.tunings] == [t.id for t in submitted.tunings]  # request order
    assert all(t.best is not None for t in group.tunings)
    assert client.group(group.id) == group
    assert next(client.groups()).id == group.id  # newest first
    assert group.id in {g.id for g in client.groups(status="done", page_size=1)}
    with pytest.raises(ApiError) as refused:  # nothing left to cancel
        client.cancel_group(group.id)
    assert refused.value.status_code == 409


def test_group_requests_are_checked_before_they_are_sent(client: Client) -> None:
    one = GroupTask(task=task("never_sent", 4.0))
    with pytest.raises(ValidationError):
        client.submit_group([], trials=TRIALS)
    with pytest.raises(ValidationError):
        client.submit_group([one] * 65, trials=TRIALS)
    with pytest.raises(ValueError, match="unknown target"):
        client.submit_group([one], target="tpu", trials=TRIALS)
    with pytest.raises(NotFoundError, match="HTTP 404"):
        client.group(999_999)
    with pytest.raises(NotFoundError, match="HTTP 404"):
        client.dispatch("0" * 64, target="cpu")


def test_submit_several_signatures_as_a_group_and_show_it(service: Service, tmp_path: Path) -> None:
    sigs = []
    for name, scale in (("cli_a", 5.0), ("cli_b", 6.0)):
        path = tmp_path / f"{name}.json"
        path.write_text(task(name, scale).model_dump_json())
        sigs.append(str(path))
    done = tunehub(service, "submit", *sigs, "--weights", "1,2", "--trials", str(TRIALS),
                   "--wait", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    group = json.loads(done.stdout)
    assert group["status"] == "done" and group["weights"] == [1.0, 2.0]
    assert len(group["tunings"]) == 2

    shown = tunehub(service, "status", str(group["id"]), "--group")
    assert shown.returncode == 0, shown.stderr
    assert f"tuning group {group['id']}" in shown.stdout and "weighted total" in shown.stdout
    watched = tunehub(service, "status", str(group["id"]), "--group", "--watch", "--json")
    assert watched.returncode == 0, watched.stderr
    assert json.loads(watched.stdout)["id"] == group["id"]

    missing = tunehub(service, "status", "999999", "--group")
    assert missing.returncode == 2
    assert missing.stderr.startswith("error: GET /v1/tuning-groups/999999: HTTP 404")


def test_submit_a_task_set_as_a_group_with_its_weights(service: Service, tmp_path: Path) -> None:
    """A task set (`tunehub extract`) goes as one group, each task weighted as the set says."""
    tasks = [
        Task(signature=task(f"set_{n}", 7.0 + n), weight=w, flops=0) for n, w in enumerate((3, 1))
    ]
    path = tmp_path / "tasks.json"
    path.write_text(
        TaskSet(source="test", tasks=tasks, flops=Flops(covered=0, total=0)).model_dump_json()
    )
    done = tunehub(service, "submit", str(path), "--trials", str(TRIALS), "--wait", "--json")
    assert done.returncode == 0, done.stderr
    group = json.loads(done.stdout)
    assert group["status"] == "done" and group["weights"] == [3.0, 1.0]
    assert len(group["tunings"]) == 2
