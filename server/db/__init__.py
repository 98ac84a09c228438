"""The tuning database: models (`models`), engines and sessions (`session`), data access (`store`).

The schema is created and changed only by the Alembic migrations in `migrations/`.
"""
