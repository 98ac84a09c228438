"""Alembic migrations of the tuning database; `server.db.session.migrate` runs them.

A package so that it ships with tunehub and is found by import path, not by the current
directory. From a checkout, the Alembic CLI works too:
`alembic -c migrations/alembic.ini upgrade head` (URL from `TUNEHUB_DATABASE_URL`).
"""

# This folder is `tunehub.migrations` (`tunehub/` links to it): loaded by its own name, it would
# be a second copy of every module in it.
if __name__ != "tunehub.migrations":
    raise ImportError(f"import it as tunehub.migrations, not {__name__}")
