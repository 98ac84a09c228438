"""`tunehub status`, `list`, `best`, `kernel` and `cancel` run as a user runs them: without a
server named or configured they read the local database `tune` wrote (and say so); with one,
the server's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cli_process import run_tunehub, tunehub_argv
from tests.signatures import row_matmul
from tunehub.compiler.canonical import workload_key
from tunehub.compiler.program import load
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope
from tunehub.server.tuner import SearchPlan, register_tuning, validate_task

SIGNATURE: dict[str, Any] = row_matmul("lookup_cli", k=16, n=24, max_m=64)
KEY = workload_key(load(SIGNATURE))
LOCAL = "reading local database"


@dataclass(frozen=True)
class Tuned:
    directory: Path
    url: str  # the local database `tunehub tune` wrote
    tuning_id: int


def _here(*args: str | Path | int) -> subprocess.CompletedProcess[str]:
    """`tunehub ARGS` with no server configured."""
    env = {k: v for k, v in os.environ.items() if k != "TUNEHUB_SERVER"}
    argv = tunehub_argv(*args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Tuned:
    directory = tmp_path_factory.mktemp("lookup_cli")
    signature = directory / "sig.json"
    signature.write_text(json.dumps(SIGNATURE))
    url = f"sqlite:///{directory / 'local.db'}"
    done = _here("tune", signature, "--trials", 2, "--symbol", "M=8", "--db", url, "--json")
    assert done.returncode == 0, done.stderr
    return Tuned(directory, url, json.loads(done.stdout)["tuning_id"])


def _queued(url: str) -> int:
    """A tuning registered in the database at `url` that nothing runs: it stays queued."""
    migrate(url)
    engine = make_engine(url)
    try:
        with session_scope(session_factory(engine)) as s:
            task = validate_task(TaskSignature.model_validate(SIGNATURE), {"M": 16})
            return register_tuning(s, task, SearchPlan("random", 4), target=Target(kind="cpu"))
    finally:
        engine.dispose()


def test_status_list_and_best_read_the_local_database_and_say_so(tuned: Tuned) -> None:
    status = _here("status", tuned.tuning_id, "--db", tuned.url, "--json")
    assert status.returncode == 0, status.stderr
    assert f"{LOCAL} {tuned.url}" in status.stderr
    view = json.loads(status.stdout)
    assert (view["id"], view["status"], view["symbols"]) == (tuned.tuning_id, "done", {"M": 8})
    listed = json.loads(_here("list", "--db", tuned.url, "--json").stdout)
    assert [t["tuning"] for t in listed] == [tuned.tuning_id]
    workloads = json.loads(_here("list", "--workloads", "--db", tuned.url, "--json").stdout)
    assert [(w["key"], w["name"]) for w in workloads] == [(KEY, "lookup_cli")]
    table = _here("list", "--workloads", "--db", tuned.url).stdout  # to a pipe: not cut
    assert KEY in table and "lookup_cli" in table
    kernels = json.loads(_here("list", "--kernels", "--db", tuned.url, "--json").stdout)
    best = _here("best", KEY[:12], "--symbol", "M=8", "--db", tuned.url, "--json")
    assert best.returncode == 0, best.stderr
    record = json.loads(best.stdout)
    assert [(k["symbols"], k["record"]) for k in kernels] == [("M=8", record["id"])]
    assert record["latency_s"] == view["best"]["latency_s"]


def test_a_missing_kernel_names_the_symbol_values_tuned(tuned: Tuned) -> None:
    out = tuned.directory / "k"
    done = _here("kernel", KEY[:12], "--symbol", "M=32", "-o", out, "--db", tuned.url)
    assert done.returncode == 2
    assert f"M=32 in the local database {tuned.url}; it has kernels for: cpu:" in done.stderr
    assert "(M=8)" in done.stderr and not out.exists()
    missing = _here("status", 999, "--db", tuned.url)
    assert missing.returncode == 2
    assert missing.stderr == (  # one line: the error names the database read
        f"error: no tuning 999 in the local database {tuned.url}"
        " (no --server, no $TUNEHUB_SERVER)\n"
    )


def test_cancel_stops_a_local_tuning_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'local.db'}"
    tuning_id = _queued(url)
    done = _here("cancel", tuning_id, "--db", url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"tuning {tuning_id} cancelled (0 of 4 trials)\n"
    status = json.loads(_here("status", tuning_id, "--db", url, "--json").stdout)
    assert status["status"] == "cancelled"
    again = _here("cancel", tuning_id, "--db", url)
    assert again.returncode == 2
    assert again.stderr == (
        f"error: tuning {tuning_id} has already ended (cancelled) (in the local database {url},"
        " no --server, no $TUNEHUB_SERVER)\n"
    )


def test_ctrl_c_on_watch_says_the_tuning_goes_on(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'local.db'}"
    tuning_id = _queued(url)
    env = {k: v for k, v in os.environ.items() if k != "TUNEHUB_SERVER"}
    argv = tunehub_argv("status", tuning_id, "--watch", "--db", url)
    with subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env) as watching:
        assert watching.stderr is not None
        assert watching.stderr.readline().startswith(LOCAL)  # it is following the tuning
        watching.send_signal(signal.SIGINT)
        _, err = watching.communicate(timeout=60)
    assert watching.returncode == 130
    assert err.splitlines()[-1] == (
        f"error: stopped watching: tuning {tuning_id} goes on; "
        f"`tunehub cancel {tuning_id}` cancels it"
    )


def test_list_and_cancel_a_servers_tuning(server: tuple[str, str]) -> None:
    api, server_db = server
    tuning_id = _queued(server_db)
    env = {**os.environ, "TUNEHUB_SERVER": api}  # configured: it says which it read
    argv = tunehub_argv("list", "--json")
    listed = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == f"reading server {api} ($TUNEHUB_SERVER)\n"
    assert [(t["tuning"], t["status"]) for t in json.loads(listed.stdout)] == [
        (tuning_id, "queued")
    ]
    argv = tunehub_argv("status", 999)
    missing = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and f"server {api}, $TUNEHUB_SERVER)" in missing.stderr
    done = run_tunehub("cancel", tuning_id, "--server", api, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "cancelled"
