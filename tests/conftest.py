"""Test-wide setup: every test run gets a private tunehub home and kernel cache."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.isa_log import ISA_LOG_ENV, isa_report

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker


def pytest_configure(config: pytest.Config) -> None:
    # Set before any tunehub module reads settings, so no test touches ~/.tunehub.
    home = tempfile.mkdtemp(prefix="tunehub-test-home-")
    os.environ["TUNEHUB_HOME"] = home
    os.environ["TUNEHUB_CACHE_DIR"] = os.path.join(home, "cache")
    os.environ.pop("TUNEHUB_DATABASE_URL", None)
    # The controller's folder, which xdist workers inherit (setdefault: theirs is its).
    os.environ.setdefault(ISA_LOG_ENV, tempfile.mkdtemp(prefix="tunehub-test-isas-"))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Which CPU ISAs the suite compiled kernels for and which it ran them on (the others'
    run tests were skipped: this host lacks them), so CI's output says what was verified."""
    found = isa_report(Path(os.environ[ISA_LOG_ENV]))
    if not found["compiled"]:
        return
    terminalreporter.section("CPU ISAs")
    for what in ("compiled", "ran"):
        terminalreporter.write_line(f"{what}: {', '.join(sorted(found[what])) or 'none'}")
    only = sorted(found["compiled"] - found["ran"])
    terminalreporter.write_line(f"compiled only (not run here): {', '.join(only) or 'none'}")


POSTGRES_URL_ENV = "TUNEHUB_TEST_POSTGRES_URL"


DATABASES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=DATABASES)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database, private to one test: a SQLite file in `tmp_path`, and a
    fresh PostgreSQL database when `TUNEHUB_TEST_POSTGRES_URL` names a server (created and
    dropped around the test; nothing else on that server is touched). Not migrated: call
    `server.db.session.migrate(url)` first."""
    yield from empty_database(request.param, tmp_path)


def empty_database(kind: str, folder: Path) -> Iterator[str]:
    """`database_url`'s database for fixtures of any scope: `kind` is "sqlite" (a file in
    `folder`) or "postgres" (skipped without a server)."""
    if kind == "sqlite":
        yield f"sqlite:///{folder / 'tunehub.db'}"
        return
    server_url = os.environ.get(POSTGRES_URL_ENV)
    if not server_url:
        pytest.skip(f"{POSTGRES_URL_ENV} is not set")
    yield from _private_postgres_database(server_url)


@pytest.fixture
def sessions(database_url: str) -> Iterator[sessionmaker[Session]]:
    """Sessions of `database_url`, migrated to the newest revision: the database the server,
    tuner and service tests store into."""
    # Imported here, like the PostgreSQL setup: not every test machine has the service stack.
    from tunehub.server.db.session import make_engine, migrate, session_factory

    migrate(database_url)
    engine = make_engine(database_url)
    try:
        yield session_factory(engine)
    finally:
        engine.dispose()


def _private_postgres_database(server_url: str) -> Iterator[str]:
    # Imported here: the compiler and worker tests run on machines without the service stack.
    from sqlalchemy import create_engine, make_url, pool, text

    name = f"tunehub_test_{uuid.uuid4().hex[:16]}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT", poolclass=pool.NullPool)
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            # FORCE: a connection a failed test left open must not keep the database alive.
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
