"""Open mode (`auth = "open"`, no tokens) serves this machine and nobody else, however the app
is served: `tunehub api`, `uvicorn tunehub.server.app:create_app --factory`, several workers.

Two lines of defence, both here:

- at startup (the ASGI lifespan), the addresses the server binds are checked, and a
  non-loopback one fails the startup with the reason (uvicorn then exits with status 3). They
  are read from the server itself: uvicorn's configuration (`--host`, `--fd`, `--uds`) when
  uvicorn runs the app (found through the signal handler uvicorn installs while it serves:
  uvicorn binds only after the startup), and otherwise the TCP sockets this process already
  listens on (a server that binds before it starts the app, as gunicorn does). The
  `api_host` setting is checked earlier still, by `create_app`.
- every request from a peer that is not a loopback address is refused with 403, whatever
  the path, health checks included: a port forward or a bind this check could not see
  still serves nobody else.

A reverse proxy on the same machine makes every client look local: run such deployments
with tokens.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from tunehub.server.api.errors import error_response

# Peers remembered as loopback or not, at most (the dict is dropped when full).
MAX_PEERS = 1024
REFUSED = "this server runs without tokens (auth=open) and answers only local clients"


class UnsafeBind(ValueError):
    """An open server (no tokens) configured on a non-loopback address."""


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (`localhost` is a name, not an address: no)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_open_bind(auth: str, host: str) -> None:
    """Refuse to serve without tokens on anything but a loopback address."""
    if auth == "open" and not (host == "localhost" or is_loopback(host)):
        raise UnsafeBind(
            f"refusing to serve on {host} without tokens: auth=open is for 127.0.0.1 or ::1; "
            "set TUNEHUB_AUTH=token and create tokens with `tunehub token create`"
        )


class LocalOnly:
    """ASGI middleware of an open server: fails a startup on a non-loopback bind, and answers
    403 to every request from a non-loopback peer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._loopback: dict[str, bool] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            try:
                for host in bound_hosts():
                    check_open_bind("open", host)
            except UnsafeBind as exc:
                await receive()  # lifespan.startup
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
        elif scope["type"] in ("http", "websocket") and not self._local(scope):
            if scope["type"] == "http":
                await error_response(403, REFUSED)(scope, receive, send)
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        await self.app(scope, receive, send)

    def _local(self, scope: Scope) -> bool:
        client = scope.get("client")
        if not client:
            return False
        host = client[0]
        loopback = self._loopback.get(host)
        if loopback is None:
            if len(self._loopback) >= MAX_PEERS:
                self._loopback.clear()
            loopback = self._loopback[host] = is_loopback(host)
        return loopback


def bound_hosts() -> list[str]:
    """The addresses the server running this app binds: from uvicorn's configuration (its
    `Server` handles SIGTERM while it serves), else this process's listening TCP sockets. A
    Unix socket is local: no address."""
    handler = signal.getsignal(signal.SIGTERM)
    config: Any = getattr(getattr(handler, "__self__", None), "config", None)
    if not all(hasattr(config, field) for field in ("host", "fd", "uds")):
        return listening_hosts()
    if config.uds is not None:
        return []
    if config.fd is not None:
        with socket.socket(fileno=os.dup(config.fd)) as sock:
            return _tcp_host(sock)
    return [str(config.host)]


def listening_hosts() -> list[str]:
    """The local addresses of the TCP sockets this process listens on (Linux and macOS read
    their descriptors; elsewhere none are found)."""
    hosts = []
    for directory in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(directory):
            break
    else:
        return []
    for name in os.listdir(directory):
        with contextlib.suppress(OSError, ValueError):
            fd = int(name)
            sock = socket.socket(fileno=fd)
            try:
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                    hosts += _tcp_host(sock)
            finally:
                sock.detach()  # it is the server's: never closed here
    return hosts


def _tcp_host(sock: socket.socket) -> list[str]:
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return []
    return [str(sock.getsockname()[0])]
