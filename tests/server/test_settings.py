"""Settings come from `TUNEHUB_*` variables, with a SQLite file in the home as the default."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunehub.server.settings import Settings, get_settings


def test_defaults_put_the_database_in_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNEHUB_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TUNEHUB_DATABASE_URL", raising=False)
    monkeypatch.delenv("TUNEHUB_REDIS_URL", raising=False)
    settings = Settings()
    assert settings.home == tmp_path / "home"
    assert settings.database_url == f"sqlite:///{tmp_path / 'home' / 'tunehub.db'}"
    # This machine's own tunings (`tunehub tune`) are kept apart from a service's.
    assert settings.local_database_url == f"sqlite:///{tmp_path / 'home' / 'local.db'}"
    assert settings.redis_url is None
    assert (settings.max_trials, settings.max_body_bytes) == (10_000, 1 << 20)
    assert not (tmp_path / "home").exists()  # reading settings creates nothing


def test_environment_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TUNEHUB_HOME", "~/th")
    monkeypatch.setenv("TUNEHUB_DATABASE_URL", "postgresql://db/tunehub")
    monkeypatch.setenv("TUNEHUB_REDIS_URL", "redis://localhost:6379/0")
    monkeypatch.setenv("TUNEHUB_MAX_TRIALS", "50")
    settings = Settings()
    assert settings.home == tmp_path / "th"
    assert settings.database_url == "postgresql://db/tunehub"
    assert settings.local_database_url == "postgresql://db/tunehub"  # named: used by both
    assert settings.redis_url == "redis://localhost:6379/0"
    assert settings.max_trials == 50


def test_get_settings_is_cached_until_cleared(monkeypatch: pytest.MonkeyPatch) -> None:
    get_settings.cache_clear()
    first = get_settings()
    assert get_settings() is first
    monkeypatch.setenv("TUNEHUB_MAX_TRIALS", "7")
    assert get_settings().max_trials == first.max_trials
    get_settings.cache_clear()
    assert get_settings().max_trials == 7
    get_settings.cache_clear()
