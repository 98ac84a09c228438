"""Where `status`, `list`, `best` and `cancel` read: a server when one is named (`--server`)
or configured (`TUNEHUB_SERVER`), else this machine's local database, the one `tune` writes.
Both answer with the API's views, so the commands print one way whichever they read, and
each says on stderr which one it read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, cast

import click

from tunehub.client.commands.common import (
    LOCAL_DB_HELP,
    SERVER_ENV,
    TOKEN_ENV,
    CliError,
    UserError,
    connect,
    local_sessions,
    local_url,
    symbols_text,
)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from tunehub.client.sdk import Client
    from tunehub.schemas.api import BestView, TuningGroupView, TuningView, WorkloadView

F = TypeVar("F", bound=Callable[..., Any])
View: TypeAlias = "TuningView | TuningGroupView"
POLL_S = 1.0  # how often a local tuning is re-read while followed


def source_options(command: F) -> F:
    """`--server` (or TUNEHUB_SERVER; without either: the local database), `--token` and
    `--db` (the local database's URL)."""
    command = click.option("--db", "db_url", help=LOCAL_DB_HELP)(command)
    command = click.option(
        "--token", envvar=TOKEN_ENV, help=f"API token, when the server needs one (${TOKEN_ENV})."
    )(command)
    return click.option(
        "--server",
        envvar=SERVER_ENV,
        help=f"A tunehub server's URL (or ${SERVER_ENV}; without either: this machine's local "
        "database, where `tunehub tune` keeps its tunings).",
    )(command)


@dataclass(frozen=True)
class BestQuery:
    """A workload's best kernel asked for: by `key` (or a prefix) or by its signature."""

    key: str | None
    task: dict[str, Any] | None
    target: str
    symbols: dict[str, int] | None  # None: any (with a signature: the tuner's defaults)
    device: str | None


class Source(Protocol):
    """What the commands read and change, from a server or from the local database."""

    where: str

    def tuning(self, tuning_id: int) -> TuningView: ...
    def group(self, group_id: int) -> TuningGroupView: ...
    def tunings(self, limit: int) -> list[TuningView]: ...
    def workloads(self, limit: int) -> list[WorkloadView]: ...
    def cancel(self, tuning_id: int) -> TuningView: ...
    def cancel_group(self, group_id: int) -> TuningGroupView: ...
    def wait(self, view: View, on_progress: Callable[[Any], None] | None) -> View: ...
    def best(self, query: BestQuery) -> BestView: ...


@contextmanager
def open_source(server: str | None, token: str | None, db_url: str | None) -> Iterator[Source]:
    """The server named, else the local database; which one is said on stderr once it has
    answered (unless the command line named it), or in the error where it fails."""
    if server is not None:
        if db_url is not None:
            raise UserError("--db names a local database: leave it out with --server")
        from click.core import ParameterSource

        source = click.get_current_context().get_parameter_source("server")
        named = source != ParameterSource.ENVIRONMENT  # on the command line: known
        note = "" if named else f"reading server {server} (${SERVER_ENV})"
        try:
            with connect(server, token) as client:
                yield cast("Source", _Said(_Remote(client, f"server {server}"), note))
        except CliError as exc:
            if named:
                raise
            message = _naming(exc.message, server, f"server {server}", f"${SERVER_ENV}")
            raise type(exc)(message) from exc
        return
    from tunehub.server.db.session import session_scope
    from tunehub.server.errors import ServiceError

    url = local_url(db_url)
    sessions = local_sessions(url)
    where, why = f"local database {url}", f"no --server, no ${SERVER_ENV}"
    try:
        with session_scope(sessions) as s:
            yield cast("Source", _Said(_Local(s, where), f"reading {where} ({why})"))
    except (ServiceError, LookupError, UserError) as exc:
        message = exc.message if isinstance(exc, UserError) else str(exc).strip("'\"")
        raise UserError(_naming(message, url, where, why)) from exc


def _naming(message: str, name: str, where: str, why: str) -> str:
    """An error's `message` naming the source read (`name`, the `where`) and why that one,
    on its one line."""
    return f"{message} ({why})" if name in message else f"{message} (in the {where}, {why})"


class _Said:
    """A source that says which one it is on stderr once it has answered, so that a lookup
    that fails is one line: the error, naming the source."""

    def __init__(self, source: object, note: str) -> None:
        self.source, self.note = source, note

    def __getattr__(self, name: str) -> Any:
        answer = getattr(self.source, name)
        if not callable(answer):
            return answer

        def said(*args: Any, **kwargs: Any) -> Any:
            result = answer(*args, **kwargs)
            if self.note:
                click.echo(self.note, err=True)
                self.note = ""
            return result

        return said


class _Remote:
    def __init__(self, client: Client, where: str) -> None:
        self.client, self.where = client, where

    def tuning(self, tuning_id: int) -> TuningView:
        return self.client.get(tuning_id)

    def group(self, group_id: int) -> TuningGroupView:
        return self.client.group(group_id)

    def tunings(self, limit: int) -> list[TuningView]:
        return _first(self.client.tunings(page_size=min(limit, 100)), limit)

    def workloads(self, limit: int) -> list[WorkloadView]:
        return _first(self.client.workloads(page_size=min(limit, 100)), limit)

    def cancel(self, tuning_id: int) -> TuningView:
        return self.client.cancel(tuning_id)

    def cancel_group(self, group_id: int) -> TuningGroupView:
        return self.client.cancel_group(group_id)

    def wait(self, view: View, on_progress: Callable[[Any], None] | None) -> View:
        from tunehub.schemas.api import TuningGroupView

        if isinstance(view, TuningGroupView):
            return self.client.wait_group(view.id, on_progress=on_progress)
        return self.client.wait(view.id, on_progress=on_progress)

    def best(self, query: BestQuery) -> BestView:
        try:
            return self.client.best(
                query.key,
                task=query.task,
                target=query.target,
                symbols=query.symbols,
                device=query.device,
            )
        except ValueError as exc:
            raise UserError(str(exc)) from exc


class _Local:
    def __init__(self, s: Session, where: str) -> None:
        self.s, self.where = s, where

    def tuning(self, tuning_id: int) -> TuningView:
        from tunehub.server.api.views import tuning_view
        from tunehub.server.db.tunings import get_tuning

        tuning = get_tuning(self.s, tuning_id)
        if tuning is None:
            raise UserError(f"no tuning {tuning_id} in the {self.where}")
        return tuning_view(self.s, tuning, None)  # stall marks live in a service's Redis

    def group(self, group_id: int) -> TuningGroupView:
        from tunehub.server.api.views import group_view
        from tunehub.server.db.groups import get_group

        group = get_group(self.s, group_id)
        if group is None:
            raise UserError(f"no tuning group {group_id} in the {self.where}")
        return group_view(self.s, group, None)

    def tunings(self, limit: int) -> list[TuningView]:
        from tunehub.server.api.views import tuning_views
        from tunehub.server.db.tunings import list_tunings

        return tuning_views(self.s, list_tunings(self.s, limit=limit), None)

    def workloads(self, limit: int) -> list[WorkloadView]:
        from tunehub.schemas.api import WorkloadView
        from tunehub.server.db.workloads import list_workloads

        return [WorkloadView.model_validate(w) for w in list_workloads(self.s, limit=limit)]

    def cancel(self, tuning_id: int) -> TuningView:
        from tunehub.server.db.tunings import get_tuning
        from tunehub.server.submit import cancel_tuning

        tuning = get_tuning(self.s, tuning_id)
        if tuning is None:
            raise UserError(f"no tuning {tuning_id} in the {self.where}")
        cancel_tuning(self.s, tuning)
        self.s.commit()  # seen by the `tune` process running it, at its next batch
        return self.tuning(tuning_id)

    def cancel_group(self, group_id: int) -> TuningGroupView:
        from tunehub.server.db.groups import get_group
        from tunehub.server.submit import cancel_group

        group = get_group(self.s, group_id)
        if group is None:
            raise UserError(f"no tuning group {group_id} in the {self.where}")
        cancel_group(self.s, group)
        self.s.commit()
        return self.group(group_id)

    def wait(self, view: View, on_progress: Callable[[Any], None] | None) -> View:
        """Re-read the tuning (or group) until it ends: the `tune` process running it
        writes its progress here after every batch."""
        import time

        from tunehub.client.sdk import FINISHED
        from tunehub.schemas.api import TuningGroupView

        while True:
            if on_progress is not None:
                on_progress(view)
            if view.status in FINISHED:
                return view
            time.sleep(POLL_S)
            self.s.expire_all()
            is_group = isinstance(view, TuningGroupView)
            view = self.group(view.id) if is_group else self.tuning(view.id)

    def best(self, query: BestQuery) -> BestView:
        from tunehub.compiler.canonical import workload_key
        from tunehub.compiler.program import load
        from tunehub.schemas.api import BestView
        from tunehub.server.best import best_for_device
        from tunehub.server.db.workloads import get_workload, resolve_workload_key
        from tunehub.server.tuner import resolve_symbols

        task, target, symbols = query.task, query.target, query.symbols
        try:
            key = workload_key(load(task)) if task is not None else query.key
            assert key is not None  # the command names one of the two
            key = resolve_workload_key(self.s, key)
            workload = get_workload(self.s, key)
            assert workload is not None  # resolved
            if task is not None:  # as the server: symbols left out take the tuner's defaults
                symbols = resolve_symbols(load(workload.signature), symbols or {})
        except ValueError as exc:  # SignatureError included
            raise UserError(str(exc)) from exc
        found = best_for_device(
            self.s, workload_key=key, target=target, symbols=symbols, device=query.device
        )
        if found.record is None:
            raise UserError(
                f"no verified kernel for workload {key[:12]} on {target} in the {self.where}"
                + tuned_values(self.s, key)
            )
        return BestView.model_validate(found.record).model_copy(update={"fallback": found.fallback})


def tuned_values(s: Session, key: str) -> str:
    """What workload `key` was tuned for, as the end of a 'no verified kernel' error: the
    targets and symbol values that have one."""
    from tunehub.schemas.record import RecordStatus
    from tunehub.server.db.records import list_records

    records = list_records(s, workload_key=key, status=RecordStatus.OK, limit=None)
    tuned = sorted({f"{r.target} ({symbols_text(r.symbols)})" for r in records})
    if not tuned:
        return ": run `tunehub tune` first"
    return f"; it has kernels for: {'; '.join(tuned)}"


T = TypeVar("T")


def _first(items: Iterator[T], limit: int) -> list[T]:
    found: list[T] = []
    for item in items:
        if len(found) == limit:
            break
        found.append(item)
    return found
