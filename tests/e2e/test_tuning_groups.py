"""Tuning groups through the whole service: one symbolic task at two sizes submitted over HTTP
as a group, run by the tuner daemon on one budget on the worker daemons, and looked up as a
dispatch table that picks the kernel for any size."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from tests.e2e.conftest import Service
from tests.signatures import row_matmul
from tunehub.schemas.api import TuningGroupView
from tunehub.schemas.dispatch import DispatchTable
from tunehub.schemas.record import RecordStatus, TuningStatus

TRIALS = 24  # three batches of eight: one warm-up batch per task, then one more
TIMEOUT_S = 240

# Small enough to build and measure in well under a second, symbolic in its rows.
MATMUL: dict[str, Any] = row_matmul("group_matmul", k=32, n=16, max_m=256)


def run_group(http: httpx.Client, weights: dict[int, float]) -> TuningGroupView:
    """Tune MATMUL at each M of `weights` (weighted so) as one group; the finished group."""
    tasks = [{"task": MATMUL, "symbols": {"M": m}, "weight": w} for m, w in weights.items()]
    body = {"tasks": tasks, "target": "cpu", "trials": TRIALS, "strategy": "random"}
    response = http.post("/v1/tuning-groups", json=body)
    assert response.status_code == 202, response.text
    group = TuningGroupView.model_validate(response.json())
    deadline = time.monotonic() + TIMEOUT_S
    while group.status in (TuningStatus.QUEUED, TuningStatus.RUNNING):
        assert time.monotonic() < deadline, f"group {group.id} still {group.status}"
        time.sleep(0.2)
        group = TuningGroupView.model_validate(http.get(f"/v1/tuning-groups/{group.id}").json())
    assert group.status == TuningStatus.DONE, group.error
    return group


def test_a_group_shares_its_budget_and_yields_a_dispatch_table(service: Service) -> None:
    with httpx.Client(base_url=service.url, timeout=30) as http:
        group = run_group(http, {2: 1000, 32: 1})
        small, large = group.tunings
        assert all(t.status == TuningStatus.DONE for t in group.tunings)
        assert all(t.best is not None and t.best.status == RecordStatus.OK for t in group.tunings)
        assert group.trials_done == small.trials_done + large.trials_done <= TRIALS
        # After a warm-up batch each, the batch goes where the weighted latency drops most.
        assert small.trials_done > large.trials_done > 0

        response = http.get(
            f"/v1/workloads/{small.workload_key}/dispatch", params={"target": group.target}
        )
        assert response.status_code == 200, response.text
        table = DispatchTable.model_validate(response.json())
        assert [e.symbols for e in table.entries] == [{"M": 2}, {"M": 32}]
        assert small.best is not None and large.best is not None
        assert [e.record.id for e in table.entries] == [small.best.id, large.best.id]
        assert table.select({"M": 1}).symbols == {"M": 2}
        assert table.select({"M": 7}).symbols == {"M": 2}
        assert table.select({"M": 9}).symbols == {"M": 32}
        assert table.select({"M": 256}).symbols == {"M": 32}


def test_weights_decide_where_the_budget_goes(service: Service) -> None:
    with httpx.Client(base_url=service.url, timeout=30) as http:
        group = run_group(http, {2: 1, 32: 1000})
        small, large = group.tunings
        assert group.weights == [1, 1000]
        assert large.trials_done > small.trials_done > 0
        assert group.trials_done <= TRIALS
        # Tuned again (after the test above): what was measured is reused, never measured twice.
        response = http.get(
            f"/v1/workloads/{small.workload_key}/records",
            params={"target": group.target, "limit": 1000},
        )
        measured = [(r["symbols"]["M"], json.dumps(r["config"], sort_keys=True))
                    for r in response.json()["items"]]  # fmt: skip
        assert len(measured) == len(set(measured))
