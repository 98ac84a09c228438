"""Alembic migrations of the tuning database; `server.db.session.migrate` runs them.

A package so that it ships with tunehub and is found by import path, not by the current
directory. From a checkout, the Alembic CLI works too:
`alembic -c migrations/alembic.ini upgrade head` (URL from `TUNEHUB_DATABASE_URL`).
"""
