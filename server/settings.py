"""Service settings, read from `TUNEHUB_*` environment variables.

Nothing is read at import time: `get_settings()` builds the settings on first use, so tests and
the CLI can set the environment (or pass explicit values) before anything looks at it.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_home() -> Path:
    return Path.home() / ".tunehub"


def _default_database_url(data: dict[str, Any]) -> str:
    # The embedded default: one SQLite file in the home directory, so a fresh install tunes
    # without any server. `home` is validated before this runs (fields validate in order).
    return f"sqlite:///{data['home'] / 'tunehub.db'}"


class Settings(BaseSettings):
    """Everything the service reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="TUNEHUB_")

    home: Path = Field(default_factory=_default_home)
    database_url: str = Field(default_factory=_default_database_url)
    redis_url: str | None = None
    max_trials: int = Field(default=10_000, gt=0)
    max_body_bytes: int = Field(default=1 << 20, gt=0)
    # The API: `open` (no tokens) is the embedded default and is refused unless the server is
    # bound to a loopback address; `token` requires `Authorization: Bearer <token>`.
    auth: Literal["open", "token"] = "open"
    # With tokens, the API's document (`/openapi.json`) and its pages (`/docs`) need a read
    # token like `/v1` unless this lists them as public.
    public_docs: bool = False
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8000, ge=1, le=65535)
    # Best-kernel lookups are served from memory this long (0: never cached). With Redis, a
    # stored batch invalidates them at once (`server.generations`); without, a client may see
    # an older best for that long after a better kernel is stored.
    best_cache_ttl_s: float = Field(default=2.0, ge=0)
    # The tunings' and groups' views and the dashboard's pages are served from the answer the
    # route gave last for this long at most (0: never kept); a batch stored, or a write to
    # this API process, drops them at once (`server.api.status_path`).
    status_cache_ttl_s: float = Field(default=0.5, ge=0)

    @property
    def local_database_url(self) -> str:
        """The database of this machine's own tunings (`tunehub tune`, `kernel`, `records`,
        `push`): `TUNEHUB_DATABASE_URL` when it is set, else `local.db` in the home. Not the
        service's `tunehub.db`: a service started here (`tunehub standalone`) numbers its
        tunings from 1 too, and `tunehub status 1` must show the service's tuning 1."""
        if "database_url" in self.model_fields_set:
            return self.database_url
        return f"sqlite:///{self.home / 'local.db'}"

    @field_validator("home")
    @classmethod
    def _absolute_home(cls, home: Path) -> Path:
        # `TUNEHUB_HOME=~/x` must not create a directory literally named `~`.
        return home.expanduser().absolute()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (cached: call `get_settings.cache_clear()` after changing the
    environment)."""
    return Settings()
