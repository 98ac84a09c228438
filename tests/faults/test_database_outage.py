"""PostgreSQL cut off in the middle of a tuning (through a proxy the test cuts and restores):
`/readyz` says not-ready meanwhile, no daemon dies, and the tuning resumes and finishes with
exactly its trials."""

from __future__ import annotations

import time

import httpx
import pytest
from sqlalchemy import make_url
from sqlalchemy.orm import Session, sessionmaker

from tests.faults.conftest import Service, submit, wait_for
from tests.faults.tcp_proxy import Proxy
from tunehub.schemas.record import TuningStatus
from tunehub.server.db.records import list_records
from tunehub.server.db.session import session_scope
from tunehub.server.db.tunings import get_tuning

TRIALS = 12


# Cut through a proxy to the PostgreSQL server (a SQLite file cannot go away).
@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_database_outage_mid_tuning_costs_no_daemon_and_no_trial(
    service: Service, sessions: sessionmaker[Session], database_url: str
) -> None:
    url = make_url(database_url)
    with Proxy((url.host or "127.0.0.1", url.port or 5432)) as proxy:
        service.env["TUNEHUB_DATABASE_URL"] = url.set(
            host="127.0.0.1", port=proxy.port
        ).render_as_string(hide_password=False)
        daemons = [service.api(), service.tuner("tuner-1"), service.worker("w1")]
        service.wait_api()
        service.wait_registered("tuner-1", "w1")
        tuning_id = submit(service.api_url, TRIALS)["id"]

        def trials_done() -> int:
            with session_scope(sessions) as s:  # directly, not through the proxy
                tuning = get_tuning(s, tuning_id)
                assert tuning is not None
                return tuning.trials_done

        wait_for(trials_done, "the first batch")
        proxy.cut()
        ready = httpx.get(f"{service.api_url}/readyz", timeout=30)
        assert ready.status_code == 503 and ready.json()["database"].startswith("error")
        time.sleep(4)
        proxy.restore()

        def ended() -> bool:
            with session_scope(sessions) as s:
                tuning = get_tuning(s, tuning_id)
                return tuning is not None and tuning.status not in ("queued", "running")

        wait_for(ended, "the tuning to end", timeout_s=120)
        with session_scope(sessions) as s:
            tuning = get_tuning(s, tuning_id)
            assert tuning is not None
            assert tuning.status == TuningStatus.DONE, tuning.error
            assert tuning.trials_done == TRIALS
            records = list_records(s, tuning_id=tuning_id, limit=None)
        assert len({r.config_key for r in records}) == len(records) == TRIALS
        assert httpx.get(f"{service.api_url}/readyz", timeout=30).status_code == 200
        for daemon in daemons:
            assert daemon.alive(), f"{daemon.name} died:\n{daemon.text()[-3000:]}"
