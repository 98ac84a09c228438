"""Storage faults are told, not hidden: a 503 names the fault class (never the driver's text,
with the database's host and port); `/readyz` and the metrics say so while the database
answers reads but refuses writes (a full disk: a small tmpfs, where the machine lets a test
mount one)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import make_url

from tests.api.conftest import MakeClient
from tests.faults.tcp_proxy import Proxy

DISK_BYTES = 4 * 1024 * 1024


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


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_BYTES mounted in `tmp_path` (skipped where mounting is not allowed)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or 'not allowed'}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until `disk` has no space left; the file."""
    filler = disk / "filler"
    with filler.open("wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    return filler


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
