"""Storage faults are told, not hidden: a 503 names the fault class (never the driver's text,
with the database's host and port); `/readyz` and the metrics say so while the database
answers reads but refuses writes (a full disk: a small tmpfs, where the machine lets a test
mount one)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from sqlalchemy import make_url

from tests.api.conftest import MakeClient
from tests.faults.conftest import Service, fill, submit, wait_for
from tests.faults.tcp_proxy import Proxy
from tests.faults.test_tuner_killed import finished
from tunehub.server.db.session import migrate

TRIALS = 16


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_503_names_the_fault_class_not_the_driver_text(
    make_client: MakeClient, database_url: str
) -> None:
    url = make_url(database_url)
    with Proxy((url.host or "127.0.0.1", url.port or 5432)) as proxy:
        proxied = url.set(host="127.0.0.1", port=proxy.port)
        client = make_client(database_url=proxied.render_as_string(hide_password=False))
        assert client.get("/v1/tunings").status_code == 200
        proxy.cut()
        response = client.get("/v1/tunings")
        ready = client.get("/readyz")
        proxy.restore()
    assert response.status_code == 503, response.text
    assert response.json() == {"detail": "the database is unavailable; retry later"}
    assert int(response.headers["Retry-After"]) > 0
    assert ready.status_code == 503
    assert ready.json()["database"] == "error: the database is unavailable"
    for leak in (str(proxy.port), "127.0.0.1", "psycopg", "connection"):
        assert leak not in response.text + ready.text


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_readyz_and_the_metrics_tell_a_full_disk(make_client: MakeClient, small_disk: Path) -> None:
    client = make_client(database_url=f"sqlite:///{small_disk / 'tunehub.db'}")
    services = client.app.state.services  # type: ignore[attr-defined]
    services.write_probe.interval_s = 0.0  # probe on every check: no waiting in a test
    assert client.get("/readyz").status_code == 200

    filler = fill(small_disk)
    full = client.get("/readyz")
    metrics = client.get("/metrics").text

    filler.unlink()
    freed = client.get("/readyz")
    assert full.status_code == 503, full.text
    assert full.json()["database"] == "error: the database's disk is full; it refuses writes"
    assert "tunehub_database_writable 0.0" in metrics
    assert freed.status_code == 200, freed.text
    assert "tunehub_database_writable 1.0" in client.get("/metrics").text


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_full_disk_marks_the_tuning_stalled_until_it_advances(
    service: Service, small_disk: Path
) -> None:
    database_url = f"sqlite:///{small_disk / 'tunehub.db'}"
    migrate(database_url)
    service.env["TUNEHUB_DATABASE_URL"] = database_url
    service.start_all()
    tuning_id = submit(service.api_url, TRIALS)["id"]
    url = f"{service.api_url}/v1/tunings/{tuning_id}"
    wait_for(lambda: httpx.get(url, timeout=10).json()["trials_done"], "the first batch")

    filler = fill(small_disk)
    stalled = wait_for(lambda: httpx.get(url, timeout=10).json()["stalled"], "the stall mark")
    ready = httpx.get(f"{service.api_url}/readyz", timeout=10)
    metrics = httpx.get(f"{service.api_url}/metrics", timeout=10).text
    page = httpx.get(f"{service.api_url}/ui/tunings/{tuning_id}", timeout=10).text
    filler.unlink()

    assert stalled == "the database's disk is full; retrying"
    assert ready.status_code == 503 and "disk is full" in ready.json()["database"]
    assert "tunehub_tunings_stalled 1.0" in metrics
    assert "Stalled: the database&#39;s disk is full" in page
    view = finished(service, tuning_id)
    assert (view["status"], view["trials_done"], view["stalled"]) == ("done", TRIALS, None)


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_readyz_tells_a_read_only_database(make_client: MakeClient, database_url: str) -> None:
    client = make_client()
    services = client.app.state.services  # type: ignore[attr-defined]
    services.write_probe.interval_s = 0.0
    name = make_url(database_url).database

    def read_only(on: bool) -> None:
        setting = "on" if on else "off"
        with services.engine.connect() as connection:
            autocommit = connection.execution_options(isolation_level="AUTOCOMMIT")
            autocommit.exec_driver_sql("SET default_transaction_read_only = off")
            autocommit.exec_driver_sql(
                f'ALTER DATABASE "{name}" SET default_transaction_read_only = {setting}'
            )
        services.engine.dispose()  # new connections take the database's setting

    read_only(True)
    try:
        refused = client.get("/readyz")
    finally:
        read_only(False)
    assert refused.status_code == 503, refused.text
    assert refused.json()["database"] == "error: the database is read-only; it refuses writes"
    assert client.get("/readyz").status_code == 200
