"""The tuning database: models (`models`), engines and sessions (`session`), and data access by
entity (`workloads`, `tunings`, `groups`, `artifacts`, `records`, `cost_models`, `tokens`, and
the status `counts`). What is read from several of them at once, the best kernel and dispatch
tables, is assembled in `server.best`.

The schema is created and changed only by the Alembic migrations in `migrations/`. Nothing here
deletes or overwrites a record, an artifact or a cost model; only a tuning's progress fields
change, and an `ok` record's timings when its kernel is measured again.
"""
