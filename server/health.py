"""Readiness checks of the service's dependencies: "ok", or what went wrong, in one line."""

from __future__ import annotations

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError


def check_database(engine: Engine) -> str:
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        return f"error: {str(exc).splitlines()[0]}"  # the rest is SQLAlchemy's help link
    return "ok"


def check_redis(redis: Redis) -> str:
    try:
        redis.ping()
    except RedisError as exc:
        return f"error: {exc}"
    return "ok"
