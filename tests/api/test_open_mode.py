"""Open mode (no tokens) serves this machine only, however the app is served: a non-loopback
bind fails the startup of real uvicorn processes (the factory included), and a request from
another machine is refused on every path."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from tests.api.api_process import ApiProcess, api_env, tunehub_api, uvicorn_factory
from tests.api.conftest import MakeClient
from tunehub.server.api.local_only import listening_hosts

EXIT_TIMEOUT_S = 60.0
REFUSAL = "refusing to serve on 0.0.0.0 without tokens"


def _ends(api: ApiProcess) -> int:
    """The exit status of a process that must stop by itself."""
    proc = api.launch()
    try:
        return proc.wait(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        api.stop()
        pytest.fail(f"it served on a public address:\n{api.output()}")


@pytest.mark.parametrize(
    "how",
    [
        "uvicorn --factory",
        "uvicorn --factory --workers 2",
        "tunehub api",
        "tunehub api --workers 2",
    ],
)
def test_an_open_server_never_starts_on_a_public_address(
    tmp_path: Path, database_url: str, redis_url: str, how: str
) -> None:
    # TUNEHUB_API_HOST is left at its loopback default: only the server knows the bind.
    env = api_env(tmp_path / "home", database_url, redis_url)
    port = ApiProcess.free_port()
    workers = ["--workers", "2"] if "workers" in how else []
    if how.startswith("uvicorn"):
        command = uvicorn_factory(port, "0.0.0.0", *workers)
    else:
        command = tunehub_api(port, "--host", "0.0.0.0", *workers)
    api = ApiProcess(command, env, tmp_path / "api.log", port)
    status = _ends(api)
    # uvicorn's supervisor of workers stops when one fails to start, with status 0.
    assert status != 0 or how == "uvicorn --factory --workers 2"
    assert REFUSAL in api.output()
    assert "Traceback" not in api.output()


def test_an_open_server_on_loopback_starts(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    env = api_env(tmp_path / "home", database_url, redis_url)
    port = ApiProcess.free_port()
    with ApiProcess(uvicorn_factory(port), env, tmp_path / "api.log", port) as api:
        assert api.proc is not None and api.proc.poll() is None


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/v1/workers", "/nowhere"])
def test_an_open_server_refuses_other_machines_on_every_path(
    make_client: MakeClient, path: str
) -> None:
    remote = make_client(client=("192.0.2.7", 5000))
    response = remote.get(path)
    assert response.status_code == 403
    assert response.json() == {
        "detail": "this server runs without tokens (auth=open) and answers only local clients"
    }
    assert make_client(client=("::1", 5000)).get(path).status_code in (200, 404)


def test_a_server_that_binds_first_is_checked_by_its_listening_sockets() -> None:
    """Servers other than uvicorn (gunicorn binds before it loads the app) are checked by
    the TCP sockets the process listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert "127.0.0.1" in listening_hosts()
    with socket.socket() as idle:  # bound, not listening: no server's
        idle.bind(("127.0.0.1", 0))
        assert "127.0.0.1" not in listening_hosts()
