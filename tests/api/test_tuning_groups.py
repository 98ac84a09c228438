"""`/v1/tuning-groups`: submit many tasks on one budget, follow the group, list, cancel; bad
groups are refused with the failing task's index."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.api.conftest import MakeClient
from tests.api.data import key_of, make_token, sessions, signature
from tunehub.schemas.api import MAX_GROUP_TASKS, Scope, TuningGroupView, TuningView
from tunehub.schemas.record import TuningStatus
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import update_tuning

TARGET = "cpu:x86_64-avx2"


def _task(name: str = "matmul_128", **fields: Any) -> dict[str, Any]:
    return {"task": signature(name), **fields}


def _body(*tasks: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"tasks": list(tasks), "target": TARGET, "trials": 8, **fields}


def _submit(client: TestClient, *tasks: dict[str, Any], **fields: Any) -> TuningGroupView:
    response = client.post("/v1/tuning-groups", json=_body(*tasks, **fields))
    assert response.status_code == 202, response.text
    return TuningGroupView.model_validate(response.json())


def _refused(client: TestClient, body: dict[str, Any], status: int = 422) -> str:
    response = client.post("/v1/tuning-groups", json=body)
    assert response.status_code == status, response.text
    detail: str = response.json()["detail"]
    assert "\n" not in detail
    return detail


def _set_status(client: TestClient, tuning_id: int, status: TuningStatus, **fields: Any) -> None:
    with session_scope(sessions(client)) as s:
        update_tuning(s, tuning_id, status=status, **fields)


def test_a_group_queues_one_tuning_per_task(client: TestClient) -> None:
    group = _submit(
        client,
        _task("int4_matmul", symbols={"M": 1}, weight=32),
        _task("int4_matmul", symbols={"M": 2048}),
        _task("softmax", weight=2.5),
    )
    assert (group.target, group.strategy, group.status) == (TARGET, "model", "queued")
    assert (group.trials_done, group.trials_total, group.weights) == (0, 8, [32, 1, 2.5])
    assert [t.symbols for t in group.tunings] == [{"M": 1}, {"M": 2048}, {}]
    assert [t.workload_key for t in group.tunings] == [
        key_of(signature("int4_matmul")),
        key_of(signature("int4_matmul")),
        key_of(signature("softmax")),
    ]
    # Each task may get the whole budget; the scheduler decides the split.
    assert all((t.status, t.trials_total, t.target) == ("queued", 8, TARGET) for t in group.tunings)
    # Members are tunings like any other.
    member = client.get(f"/v1/tunings/{group.tunings[1].id}").json()
    assert TuningView.model_validate(member) == group.tunings[1]


def test_bad_groups_are_refused_with_the_tasks_index(make_client: MakeClient) -> None:
    client = make_client(max_trials=10)
    good = _task()
    assert "tasks: List should have at least 1 item" in _refused(client, _body())
    too_many = _body(*[good] * (MAX_GROUP_TASKS + 1))
    assert "tasks: List should have at most 64 items" in _refused(client, too_many)
    broken = signature()
    broken["computes"][0]["expr"] = "A[i, k] * Q[k, j]"
    detail = _refused(client, _body(good, _task("softmax"), {"task": broken}))
    assert detail.startswith("tasks[2]: ") and "Q" in detail
    shapeless = signature()
    del shapeless["inputs"][0]["shape"]
    detail = _refused(client, _body(good, {"task": shapeless}))
    assert detail.startswith("invalid request: tasks[1].task.inputs[0].shape: Field required")
    detail = _refused(client, _body(good, _task("int4_matmul", symbols={"M": 0})))
    assert detail.startswith("tasks[1]: symbols: symbol M=0 is outside its range")
    assert "tasks[0].weight" in _refused(client, _body(_task(weight=0)))
    detail = _refused(client, _body(good, _task("softmax"), good))
    assert detail.startswith("tasks[2]: the same workload and symbols as tasks[0]")
    detail = _refused(client, _body(good, strategy="magic"))
    assert detail.startswith("strategy: unknown strategy 'magic'")
    # The budget is capped per task: 2 tasks, 10 each.
    detail = _refused(client, _body(good, _task("softmax"), trials=21))
    assert detail == "trials: 21 is over this server's limit of 20 (10 per task)"
    assert _submit(client, good, _task("softmax"), trials=20).trials_total == 20
    # Nothing of the refused groups was stored.
    assert len(client.get("/v1/tuning-groups").json()["items"]) == 1
    assert len(client.get("/v1/tunings").json()["items"]) == 2


def test_a_task_already_being_tuned_is_a_conflict_and_a_member_is_joined(
    client: TestClient,
) -> None:
    single = client.post("/v1/tunings", json={"task": signature(), "target": TARGET, "trials": 4})
    detail = _refused(client, _body(_task("softmax"), _task()), status=409)
    assert detail.startswith(f"tasks[1]: tuning {single.json()['id']} of the same workload")
    client.post(f"/v1/tunings/{single.json()['id']}/cancel")
    group = _submit(client, _task("softmax"), _task())
    # A single request for a member's task joins the member.
    joined = client.post("/v1/tunings", json={"task": signature(), "target": TARGET, "trials": 4})
    assert (joined.json()["outcome"], joined.json()["id"]) == ("joined", group.tunings[1].id)


Q, R, D, F, C = (
    TuningStatus.QUEUED,
    TuningStatus.RUNNING,
    TuningStatus.DONE,
    TuningStatus.FAILED,
    TuningStatus.CANCELLED,
)
# Members' statuses, and the group's.
GROUP_STATUSES = [
    ((Q, Q), Q),
    ((R, Q), R),
    ((D, Q), R),
    ((C, R), R),
    ((D, D), D),
    ((D, F), F),
    ((C, F), F),
    ((D, C), C),
]


def test_the_group_status_follows_its_members_in_views_and_filters(client: TestClient) -> None:
    for members, expected in GROUP_STATUSES:
        group = _submit(client, _task(), _task("softmax"))
        for tuning, status in zip(group.tunings, members, strict=True):
            error = f"{status} here\ntraceback" if status in (F, C) else None
            _set_status(client, tuning.id, status, trials_done=4, error=error)
        view = TuningGroupView.model_validate(client.get(f"/v1/tuning-groups/{group.id}").json())
        assert view.status == expected, members
        assert view.trials_done == 8
        assert (view.finished_at is None) == (expected in (Q, R))
        assert (view.started_at is not None) == (R in members)  # set when one runs
        assert view.error == (f"{expected} here" if expected in (F, C) else None)
        for status in (Q, R, D, F, C):
            listed = client.get("/v1/tuning-groups", params={"status": status}).json()["items"]
            assert (group.id in {g["id"] for g in listed}) == (status == expected), members
        # End what is left, so that the next group may tune the same tasks.
        for tuning, status in zip(group.tunings, members, strict=True):
            if status in (Q, R):
                _set_status(client, tuning.id, C)


def test_cancel_ends_the_unfinished_members_once(client: TestClient) -> None:
    group = _submit(client, _task(), _task("softmax"), _task("gelu"))
    done = group.tunings[0].id
    _set_status(client, done, TuningStatus.DONE)
    response = client.post(f"/v1/tuning-groups/{group.id}/cancel")
    assert response.status_code == 200
    cancelled = TuningGroupView.model_validate(response.json())
    assert cancelled.status == "cancelled"
    assert [t.status for t in cancelled.tunings] == ["done", "cancelled", "cancelled"]
    again = client.post(f"/v1/tuning-groups/{group.id}/cancel")
    assert again.status_code == 409
    assert again.json() == {"detail": f"tuning group {group.id} has already ended (cancelled)"}


def test_get_and_list_pages(client: TestClient) -> None:
    ids = [_submit(client, _task(name)).id for name in ("matmul_128", "softmax", "gelu")]
    first = client.get("/v1/tuning-groups", params={"limit": 2}).json()
    assert [g["id"] for g in first["items"]] == ids[::-1][:2]
    assert first["next_offset"] == 2
    rest = client.get("/v1/tuning-groups", params={"limit": 2, "offset": 2}).json()
    assert ([g["id"] for g in rest["items"]], rest["next_offset"]) == ([ids[0]], None)
    assert client.get("/v1/tuning-groups/999").json() == {"detail": "no tuning group 999"}
    assert client.get("/v1/tuning-groups/999").status_code == 404
    assert client.post("/v1/tuning-groups/999/cancel").status_code == 404
    assert client.get("/v1/tuning-groups/0").status_code == 422


def test_without_redis_a_group_is_refused(make_client: MakeClient) -> None:
    client = make_client(redis_url=None)
    detail = _refused(client, _body(_task()), status=503)
    assert "cannot queue tuning groups" in detail
    assert client.get("/v1/tunings").json()["items"] == []


def test_scopes_submit_read_and_cancel(make_client: MakeClient) -> None:
    client = make_client(auth="token")
    secrets = {scope: make_token(sessions(client), scope) for scope in Scope}

    def as_(scope: Scope) -> dict[str, str]:
        return {"Authorization": f"Bearer {secrets[scope]}"}

    body = _body(_task())
    assert client.post("/v1/tuning-groups", json=body).status_code == 401
    assert client.post("/v1/tuning-groups", json=body, headers=as_(Scope.READ)).status_code == 403
    submitted = client.post("/v1/tuning-groups", json=body, headers=as_(Scope.SUBMIT))
    assert submitted.status_code == 202
    path = f"/v1/tuning-groups/{submitted.json()['id']}"
    assert client.get(path, headers=as_(Scope.READ)).status_code == 200
    assert client.get("/v1/tuning-groups", headers=as_(Scope.READ)).status_code == 200
    assert client.post(f"{path}/cancel", headers=as_(Scope.SUBMIT)).status_code == 403
    assert client.post(f"{path}/cancel", headers=as_(Scope.ADMIN)).status_code == 200


def _renamed_int4() -> dict[str, Any]:
    """The int4 matmul with its symbol called `rows`: the same workload."""
    sig = signature("int4_matmul")
    sig["symbols"] = {"rows": sig["symbols"]["M"]}
    for tensor in (*sig["inputs"], *sig["computes"]):
        tensor["shape"] = ["rows" if d == "M" else d for d in tensor["shape"]]
    return sig


def test_symbols_are_matched_by_position_whatever_their_names(client: TestClient) -> None:
    renamed = _renamed_int4()
    assert key_of(renamed) == key_of(signature("int4_matmul"))
    detail = _refused(
        client,
        _body(_task("int4_matmul", symbols={"M": 8}), {"task": renamed, "symbols": {"rows": 8}}),
    )
    assert detail.startswith("tasks[1]: the same workload and symbols as tasks[0]")
    group = _submit(
        client,
        _task("int4_matmul", symbols={"M": 8}),
        {"task": renamed, "symbols": {"rows": 32}},
    )
    # Stored under the names the workload keeps (its first signature's), so the tuner, the
    # best lookups and the dispatch table all see one symbol.
    assert [t.symbols for t in group.tunings] == [{"M": 8}, {"M": 32}]
    body = {"task": renamed, "target": TARGET, "trials": 4, "symbols": {"rows": 32}}
    joined = client.post("/v1/tunings", json=body).json()
    assert (joined["outcome"], joined["id"]) == ("joined", group.tunings[1].id)


def test_a_groups_time_limit_is_kept_by_the_group_and_its_tunings(client: TestClient) -> None:
    group = _submit(client, _task(), _task("gelu"), time_limit_s=600)
    assert group.time_limit_s == 600
    assert [t.time_limit_s for t in group.tunings] == [600, 600]
    assert "time_limit_s" in _refused(client, _body(_task(), time_limit_s=0))
