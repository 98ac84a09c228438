"""Commands that run the service's processes: `standalone` and `demo` (everything on this
machine), and the daemons one at a time: `api`, `tuner`, `worker` (and `token` to manage the
API's tokens). The service stack is imported inside each command, so `tunehub --help` stays
fast and the CLI works on a machine with only the worker side installed."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tunehub.client.commands.admin import api, token
from tunehub.client.commands.common import InternalError, UserError

if TYPE_CHECKING:
    from tunehub.server.standalone import Stack, StackConfig

# The demo's workload; in the checkout (the examples are not installed with the package).
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "matmul_128.json"
_DB_HELP = "Database URL (default: TUNEHUB_DATABASE_URL or ~/.tunehub)."
_REDIS_HELP = "Use this Redis instead of starting a private redis-server."


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address of the API.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="0: any free."
)
@click.option("--redis", "redis_url", help=_REDIS_HELP)
@click.option("--db", "db_url", help=_DB_HELP)
@click.option("--workers", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--threads", type=click.IntRange(min=1), help="Threads per worker (default: all).")
@click.option(
    "--api-workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="API processes sharing the port.",
)
def standalone(
    host: str,
    port: int,
    redis_url: str | None,
    db_url: str | None,
    workers: int,
    threads: int | None,
    api_workers: int,
) -> None:
    """Run the whole service here (Redis, API, tuner, workers) until Ctrl-C."""
    import time

    from tunehub.server.app import UnsafeBind, check_open_bind
    from tunehub.server.settings import get_settings
    from tunehub.server.standalone import StackConfig

    settings = get_settings()
    try:
        check_open_bind(settings.auth, host)
    except UnsafeBind as exc:
        raise UserError(str(exc)) from exc
    if port:
        _check_free(host, port)
    config = StackConfig(
        home=settings.home,
        database_url=db_url or settings.database_url,
        redis_url=redis_url,
        host=host,
        port=port,
        workers=workers,
        worker_threads=threads,
        api_workers=api_workers,
    )
    with _running(config) as stack:
        redis = "a private redis-server" if stack.private_redis else stack.redis_url
        click.echo(f"tunehub is serving at {stack.url} (Ctrl-C stops it)")
        click.echo(f"  redis     {stack.redis_url} ({redis})")
        click.echo(f"  database  {config.database_url}")
        click.echo(f"  daemons   a tuner and {workers} worker(s); logs in {config.log_dir}")
        click.echo(f"  try       export TUNEHUB_SERVER={stack.url}  (status, list, best read it)")
        click.echo("            tunehub submit SIG.json --wait")
        while True:
            time.sleep(0.5)
            stack.check()


def _check_free(host: str, port: int) -> None:
    """Fail at once, in one line, where the API's port is taken (another `standalone`, say),
    before Redis, the database or any daemon is started."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise UserError(
                f"cannot serve at {host}:{port}: {exc.strerror} (another tunehub standalone? "
                "--port names another)"
            ) from exc


@click.command()
@click.argument(
    "signature_file",
    type=click.Path(path_type=Path),
    required=False,
    metavar="[SIG.json]",
)
@click.option("--trials", type=click.IntRange(min=1), default=32, show_default=True)
@click.option(
    "--target",
    default="cpu",
    show_default=True,
    help="cpu or cuda[:sm_XX] (a GPU's kernel runs on torch tensors of this machine's GPU).",
)
@click.option(
    "--db",
    "db_url",
    help="Database URL (default: a fresh one in ~/.tunehub/demo/, with the demo's logs and "
    "kernel, replaced by the next demo).",
)
@click.option("--redis", "redis_url", help=_REDIS_HELP)
@click.option("--threads", type=click.IntRange(min=1), help="Threads of the worker (default: all).")
def demo(
    signature_file: Path | None,
    trials: int,
    target: str,
    db_url: str | None,
    redis_url: str | None,
    threads: int | None,
) -> None:
    """Start the service, tune examples/matmul_128.json through its HTTP API, and run the
    kernel it found (checked against numpy)."""
    path = signature_file or EXAMPLE
    if not path.is_file():
        raise UserError(f"no signature at {path}: pass one (tunehub demo SIG.json)")
    from tunehub.client.demo import run_demo
    from tunehub.server.settings import get_settings
    from tunehub.server.standalone import StackConfig

    # The demo's own folder, replaced by the next demo: its logs outlive it, where it says.
    home = get_settings().home / "demo"
    shutil.rmtree(home, ignore_errors=True)
    config = StackConfig(
        home=home,
        database_url=db_url or f"sqlite:///{home / 'tunehub.db'}",
        redis_url=redis_url,
        worker_threads=threads,
    )
    with _running(config) as stack:
        if not run_demo(stack, path, trials=trials, out_dir=home / "kernel", target=target):
            raise InternalError("the demo's kernel did not match the reference")


@click.command()
@click.option("--redis", "redis_url", envvar="TUNEHUB_REDIS_URL", help="Redis URL.")
@click.option("--name", help="Tuner name (default: host-pid-tuner).")
@click.option("--burst", is_flag=True, help="Quit when no tuning is queued.")
def tuner(redis_url: str | None, name: str | None, burst: bool) -> None:
    """Run queued tunings: the tuner daemon (needs TUNEHUB_DATABASE_URL and Redis)."""
    from tunehub.server.tuner.service import run_tuner_daemon
    from tunehub.worker.queues import DEFAULT_REDIS_URL

    _log_to_stderr()
    try:
        run_tuner_daemon(redis_url or DEFAULT_REDIS_URL, name=name, burst=burst)
    except ValueError as exc:  # the name is taken by a living tuner
        raise UserError(str(exc)) from exc


@click.command()
@click.option("--redis", "redis_url", envvar="TUNEHUB_REDIS_URL", help="Redis URL.")
@click.option("--queues", multiple=True, help="Queue to serve (default: this machine's).")
@click.option("--threads", type=click.IntRange(min=1), help="Threads offered for measurements.")
@click.option("--name", help="Worker name (default: host-pid-random).")
@click.option("--burst", is_flag=True, help="Quit when the queues are empty.")
@click.option(
    "--gpus",
    metavar="all|0,1",
    help="Measure on these GPUs in parallel, a daemon per GPU (default: one daemon, "
    "measurements take turns on the machine).",
)
def worker(
    redis_url: str | None,
    queues: tuple[str, ...],
    threads: int | None,
    name: str | None,
    burst: bool,
    gpus: str | None,
) -> None:
    """Build and measure candidates for the tuners (joins with only the Redis URL)."""
    # The daemon is a program of its own (`python -m tunehub.worker.daemon`, what a GPU node
    # runs from a plain checkout): this command becomes it, so the CLI never loads its loop.
    argv = [sys.executable, "-m", "tunehub.worker.daemon"]
    options = {"--redis": redis_url, "--threads": threads, "--name": name, "--gpus": gpus}
    for option, value in options.items():
        if value is not None:
            argv += [option, str(value)]
    if queues:
        argv += ["--queues", *queues]
    if burst:
        argv.append("--burst")
    os.execv(sys.executable, argv)


@click.command()
@click.option("--db", "db_url", help=_DB_HELP)
def migrate(db_url: str | None) -> None:
    """Create or upgrade the database's schema (the API and the tuner also do on start)."""
    from sqlalchemy.exc import OperationalError

    from tunehub.server.db.session import migrate as upgrade
    from tunehub.server.settings import get_settings

    url = db_url or get_settings().database_url
    shown = _hide_password(url)
    try:
        upgrade(url)
    except OperationalError as exc:
        raise InternalError(f"cannot use the database at {shown}: {exc.orig}") from exc
    click.echo(f"the database is at the latest schema: {shown}")


COMMANDS = [standalone, demo, api, tuner, worker, token, migrate]


@contextmanager
def _running(config: StackConfig) -> Iterator[Stack]:
    """The started stack; stopped however the block ends (Ctrl-C and SIGTERM included)."""
    from tunehub.server.standalone import Stack, StackError, stop_signals_interrupt

    stack = Stack(config)
    with stop_signals_interrupt():
        try:
            stack.start()
        except StackError as exc:
            raise InternalError(str(exc)) from exc
        try:
            yield stack
        except KeyboardInterrupt:
            click.echo("stopping...", err=True)
        except StackError as exc:
            raise InternalError(str(exc)) from exc
        finally:
            stack.stop()


def _hide_password(url: str) -> str:
    from sqlalchemy import make_url

    return make_url(url).render_as_string(hide_password=True)


def _log_to_stderr() -> None:
    """The service commands log at INFO unless told otherwise (`worker.logs`)."""
    from tunehub.worker import logs

    try:
        logs.configure(logging.INFO)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
