"""Engines, migrations and sessions for the tuning database (SQLite or PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker

from tunehub import migrations

# How long a SQLite writer waits for another one to commit before giving up ("database is
# locked"). The tuner, the API and local workers all write to one file in the embedded mode.
SQLITE_BUSY_TIMEOUT_MS = 30_000


def _configure_sqlite(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers run beside the one writer; foreign keys are off by default in SQLite.
    # The timeout comes first: switching a new file to WAL waits for other connections too.
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _create_sqlite_directory(url: str) -> None:
    # SQLite creates the file but not its directory: a fresh `~/.tunehub` must just work.
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def make_engine(url: str) -> Engine:
    """An engine for `url`, set up for concurrent use by the service.

    SQLite: WAL journal, foreign keys on, a busy timeout, and the file's directory created.
    PostgreSQL: connections are checked before use, so a restarted server costs no request.
    """
    if make_url(url).get_backend_name() == "sqlite":
        _create_sqlite_directory(url)
        engine = create_engine(url)
        event.listen(engine, "connect", _configure_sqlite)
        return engine
    return create_engine(url, pool_pre_ping=True)


def alembic_config(url: str) -> Config:
    """An Alembic config for `url` that finds the migrations next to the installed package,
    whatever the current directory is."""
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    # Passed as an attribute rather than a main option: config-file interpolation would
    # mangle a `%` in a password.
    config.attributes["database_url"] = url
    return config


def migrate(url: str, revision: str = "head") -> None:
    """Bring the database at `url` to `revision` (`alembic upgrade head`); a no-op when it is
    already there. This is the only way tunehub creates or changes its schema."""
    _create_sqlite_directory(url)
    command.upgrade(alembic_config(url), revision)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions whose objects stay readable after commit (the API serializes them after the
    transaction ends)."""
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One transaction: committed when the block ends normally, rolled back when it raises."""
    with factory() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
