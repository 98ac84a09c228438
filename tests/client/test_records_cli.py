"""`tunehub records export|import` and `tunehub push`, run as a user runs them: a tuning made
here by `tunehub tune`, moved to another database and to a running server, gives the same
best kernels and dispatch tables there; doing it again adds nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cli_process import run_tunehub
from tests.signatures import row_matmul
from tunehub.compiler.canonical import workload_key
from tunehub.compiler.program import load
from tunehub.schemas.target import Target
from tunehub.server.best import best_record, dispatch_table
from tunehub.server.db.records import count_records
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope

SIGNATURE: dict[str, Any] = row_matmul("records_cli", k=16, n=24, max_m=64)
KEY = workload_key(load(SIGNATURE))


@dataclass(frozen=True)
class Tuned:
    directory: Path
    url: str  # the local database `tunehub tune` wrote
    n_records: int


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Tuned:
    directory = tmp_path_factory.mktemp("records_cli")
    signature = directory / "sig.json"
    signature.write_text(json.dumps(SIGNATURE))
    url = f"sqlite:///{directory / 'local.db'}"
    done = run_tunehub("tune", signature, "--trials", 6, "--symbol", "M=8,32", "--db", url)
    assert done.returncode == 0, done.stderr
    return Tuned(directory, url, _count(url))


def _count(url: str) -> int:
    engine = make_engine(url)
    try:
        with session_scope(session_factory(engine)) as s:
            return count_records(s)
    finally:
        engine.dispose()


def _lookups(url: str) -> tuple[Any, ...]:
    """The best kernel at each tuned value and the dispatch table, as comparable values."""
    migrate(url)
    engine = make_engine(url)
    try:
        with session_scope(session_factory(engine)) as s:
            bests = [
                best_record(s, workload_key=KEY, target="cpu", symbols={"M": m}) for m in (8, 32)
            ]
            table = dispatch_table(s, KEY, Target(kind="cpu"))
            assert table is not None
            return (
                [(b.config, b.latency_s, b.artifact_sha256) for b in bests if b is not None],
                [(e.symbols, e.record.config, e.record.artifact_sha256) for e in table.entries],
            )
    finally:
        engine.dispose()


def test_export_then_import_gives_the_same_kernels(tuned: Tuned, tmp_path: Path) -> None:
    exported = tmp_path / "records.jsonl"
    done = run_tunehub(
        "records", "export", "--workload", KEY[:12], "-o", exported, "--db", tuned.url
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == f"wrote {exported}: {tuned.n_records} records"
    other = f"sqlite:///{tmp_path / 'other.db'}"
    first = run_tunehub("records", "import", exported, "--db", other)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"imported {tuned.n_records} records (0 already there)")
    again = run_tunehub("records", "import", exported, "--db", other)
    assert again.stdout.startswith(f"imported 0 records ({tuned.n_records} already there)")
    assert _lookups(other) == _lookups(tuned.url)
    to_stdout = run_tunehub("records", "export", "--db", other)
    assert to_stdout.stdout == exported.read_text()  # exported again: the same file


def test_push_sends_local_tunings_to_a_server(tuned: Tuned, server: tuple[str, str]) -> None:
    api, server_db = server
    pushed = run_tunehub("push", "--server", api, "--db", tuned.url)
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stdout.startswith(f"imported {tuned.n_records} records")
    again = run_tunehub("push", "--server", api, "--db", tuned.url)
    assert again.stdout.startswith(f"imported 0 records ({tuned.n_records} already there)")
    assert _lookups(server_db) == _lookups(tuned.url)
    best = run_tunehub("best", KEY[:12], "--server", api, "--symbol", "M=8", "--json")
    assert best.returncode == 0, best.stderr
    assert (json.loads(best.stdout)["config"], json.loads(best.stdout)["latency_s"]) == (
        _lookups(tuned.url)[0][0][:2]
    )
    # Measured here: `--device here` finds this machine's records; another model falls back.
    here = run_tunehub("best", KEY[:12], "--server", api, "--device", "here", "--json")
    assert here.returncode == 0, here.stderr
    assert json.loads(here.stdout)["fallback"] is None
    assert json.loads(here.stdout)["device"] == json.loads(best.stdout)["device"] != "unknown"
    other = run_tunehub("best", KEY[:12], "--server", api, "--device", "Other CPU")
    assert other.returncode == 0, other.stderr
    assert other.stdout.splitlines()[-1] == (
        f"note: no record measured on Other CPU; best on cpu measured on "
        f"{json.loads(best.stdout)['device']}"
    )


def test_bad_input_is_one_line(tuned: Tuned, tmp_path: Path) -> None:
    missing = run_tunehub("records", "import", tmp_path / "none.jsonl", "--db", tuned.url)
    assert missing.returncode == 2 and missing.stderr.startswith("error: cannot read")
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text('{"type": "header", "format": "tunehub-records", "version": 9}\n')
    refused = run_tunehub("records", "import", garbage, "--db", tuned.url)
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith("records format version 9; this tunehub reads version 1")
    unknown = run_tunehub("kernel", "xyz", "-o", tmp_path / "k", "--db", tuned.url)
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("error: no workload has a key starting with 'xyz'")
    both = run_tunehub("records", "import", garbage, "--db", tuned.url, "--server", "http://x")
    assert both.returncode == 2 and "not both" in both.stderr
    for result in (missing, refused, unknown, both):
        assert len(result.stderr.strip().splitlines()) == 1


def test_the_sdk_sends_a_large_file_in_batches(tuned: Tuned, server: tuple[str, str]) -> None:
    """Each line its own batch (as a file larger than the server's body limit goes): every
    batch carries the header, and what one batch stores, the next may name."""
    from tunehub.client.sdk import Client
    from tunehub.server.records import export_lines

    engine = make_engine(tuned.url)
    try:
        with session_scope(session_factory(engine)) as s:
            lines = list(export_lines(s))
    finally:
        engine.dispose()
    api, server_db = server
    with Client(api) as client:
        first = client.import_records(lines, batch_bytes=1)
        again = client.import_records(lines, batch_bytes=1)
    assert (first.records, first.duplicates, first.workloads) == (tuned.n_records, 0, 1)
    assert (again.records, again.duplicates, again.workloads) == (0, tuned.n_records, 0)
    assert _lookups(server_db) == _lookups(tuned.url)
