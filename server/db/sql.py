"""What the data-access modules share: the one text a JSON value is looked up by, and an
insert that leaves a row already there alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


def canonical_json(value: Any) -> str:
    """The one canonical text of a JSON value (sorted keys, no spaces): equal values, equal
    strings. Symbol values are looked up by it; configs use `Space.key`, which is the same."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def insert_if_absent(s: Session, model: type[Any], values: Mapping[str, Any]) -> None:
    """INSERT ... ON CONFLICT DO NOTHING on the primary key: safe when two writers add the same
    content-addressed row at once (a check-then-insert would race)."""
    dialect = s.get_bind().dialect.name
    if dialect == "postgresql":
        insert: Any = postgresql.insert
    elif dialect == "sqlite":
        insert = sqlite.insert
    else:
        raise NotImplementedError(f"unsupported database {dialect!r} (SQLite or PostgreSQL)")
    s.execute(insert(model).values(**values).on_conflict_do_nothing())
