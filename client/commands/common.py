"""What every `tunehub` command shares: one-line errors with exit codes, reading signature
files and task sets, `--target` and `--device`, `--symbol NAME=VALUE[,VALUE...]` and the tasks
it makes, `--weights`, the server options and the client they open, number formats."""

from __future__ import annotations

import itertools
import json
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from tunehub.client.sdk import Client
    from tunehub.compiler.ir import Program
    from tunehub.schemas.dispatch import DispatchTable

SERVER_ENV, TOKEN_ENV = "TUNEHUB_SERVER", "TUNEHUB_TOKEN"
F = TypeVar("F", bound=Callable[..., Any])
_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")
TUNE_SYMBOL_HELP = (
    "Symbol values to tune for: a list tunes each value (M=1,8,32), several symbols every "
    "combination, each a task of the trial budget (default: each symbol at 64, clamped)."
)


# The packages of the extras (`pyproject.toml`) a command may find missing, by the top-level
# module it imports: the core install has the client and the runtime alone.
_EXTRAS = (
    (
        "server",
        (
            "fastapi",
            "uvicorn",
            "sqlalchemy",
            "alembic",
            "xgboost",
            "psycopg",
            "prometheus_client",
            "pydantic_settings",
        ),
    ),
    ("worker", ("redis", "rq", "threadpoolctl")),
    ("cuda", ("cuda",)),  # cuda-python's package
)
_EXTRA_OF_MODULE = {module: extra for extra, modules in _EXTRAS for module in modules}


def missing_extra(module: str | None) -> str | None:
    """The extra that installs `module` (a dotted name: its top level counts); None for a
    module no extra provides (then its absence is a bug, not an install choice)."""
    return _EXTRA_OF_MODULE.get((module or "").partition(".")[0])


class CliError(click.ClickException):
    """An error shown as one line, `error: ...`, never with a traceback."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {one_line(self.message)}", err=True)


class UserError(CliError):
    """A mistake in the command's input (a file, a signature, an option): exit 2."""

    exit_code = 2


class Interrupted(CliError):
    """Ctrl-C, with what it left running: exit 130, as the shell's."""

    exit_code = 130


class InternalError(CliError):
    """Something in tunehub failed: exit 1."""

    exit_code = 1


LOCAL_DB_HELP = (
    "Database URL (default: TUNEHUB_DATABASE_URL, else this machine's own tunings in "
    "~/.tunehub/local.db; a service started here keeps its own, tunehub.db)."
)
TIME_LIMIT_OPTION = click.option(
    "--time-limit",
    "time_limit_s",
    type=click.FloatRange(min=0, min_open=True, max=7 * 24 * 3600.0),
    metavar="SECONDS",
    help="Stop after this much wall-clock time (at the next batch) even if trials remain.",
)
SIGNATURE_OPTION = click.option(
    "--signature",
    "signature_file",
    type=click.Path(path_type=Path),
    help="Name the workload by its signature instead of its key.",
)
DEVICE_OPTION = click.option(
    "--device",
    metavar="MODEL|here",
    help="Your device model (a GPU's or CPU's name, as records show it; `here`: this "
    "machine's): its records are preferred, others of the target used only when it has none "
    "(a note says so).",
)


def caller_device(device: str | None, target_text: str) -> str | None:
    """`--device` as lookups take it: a model name as given, or for `here` this machine's own
    device of the target's kind (its first, for a target without ISA or arch), as a worker
    here would record it."""
    if device != "here":
        return device
    from tunehub.schemas.record import UNKNOWN_DEVICE
    from tunehub.worker.backend import worker_backend
    from tunehub.worker.device import fingerprint

    target = parse_target(target_text)
    if not target.complete:
        here = worker_backend(target).local_targets()
        if not here:
            raise UserError(f"--device here: this machine has no {target} device")
        target = here[0]
    model = str(fingerprint(target, 1).get("device") or UNKNOWN_DEVICE)
    if model == UNKNOWN_DEVICE:
        raise UserError(f"--device here: this machine has no device that runs {target} code")
    return model


def parse_target(text: str) -> Target:
    """`--target` as a Target; UserError for one that is not."""
    try:
        return Target.parse(text)
    except ValueError as exc:
        raise UserError(str(exc)) from exc


def target_here(target: Target) -> Target:
    """An incomplete target completed to this machine's own ISA or GPU where it has one of
    that kind (`cpu` -> `cpu:x86_64-avx2`); as given otherwise."""
    from tunehub.worker.backend import worker_backend

    if target.complete or not worker_backend(target).local_targets():
        return target
    try:
        return worker_backend(target).resolve(target)
    except ValueError as exc:
        raise UserError(str(exc)) from exc


def server_options(command: F) -> F:
    """`--server` and `--token`, from TUNEHUB_SERVER and TUNEHUB_TOKEN by default."""
    from tunehub.client.sdk import DEFAULT_SERVER

    command = click.option(
        "--token",
        envvar=TOKEN_ENV,
        help=f"API token, when the server needs one (default: ${TOKEN_ENV}).",
    )(command)
    return click.option(
        "--server",
        envvar=SERVER_ENV,
        default=DEFAULT_SERVER,
        show_default=True,
        help=f"The tunehub server's URL (or ${SERVER_ENV}).",
    )(command)


@contextmanager
def connect(server: str, token: str | None) -> Iterator[Client]:
    """A client of `server`; its errors become one-line CLI errors: the server's 4xx answers
    are the user's (exit 2), anything else tunehub's or the network's (exit 1)."""
    from tunehub.client.errors import ApiError, ClientError
    from tunehub.client.sdk import Client

    try:
        with Client(server, token) as client:
            yield client
    except ApiError as exc:
        error = UserError if 400 <= exc.status_code < 500 else InternalError
        raise error(str(exc)) from exc
    except ClientError as exc:
        raise InternalError(str(exc)) from exc


def local_url(db_url: str | None) -> str:
    """`--db`, else this machine's tunings (`Settings.local_database_url`)."""
    from tunehub.server.settings import get_settings

    return db_url or get_settings().local_database_url


def local_sessions(db_url: str | None) -> sessionmaker[Session]:
    """A session factory on the migrated database at `db_url` (default: this machine's
    tunings, `Settings.local_database_url`)."""
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

    from tunehub.server.db.session import make_engine, migrate, session_factory

    url = local_url(db_url)
    try:
        migrate(url)
        return session_factory(make_engine(url))
    except (ArgumentError, NoSuchModuleError) as exc:
        raise UserError(f"invalid database URL {url!r}: {exc}") from exc
    except OperationalError as exc:
        raise UserError(f"cannot use the database at {url!r}: {exc.orig}") from exc


def read_signature(path: Path) -> dict[str, Any]:
    """The JSON document in `path` (validated where it is used); UserError when unreadable."""
    try:
        document = json.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: invalid JSON: {exc}") from exc
    except RecursionError as exc:  # the json module recurses once per level of nesting
        raise UserError(f"{path}: invalid JSON: nested too deeply") from exc
    if not isinstance(document, dict):
        raise UserError(f"{path}: a task signature is a JSON object")
    return document


def load_signature(path: Path) -> tuple[TaskSignature, Program]:
    """The signature in `path` and its validated program; UserError for anything wrong."""
    return load_document(read_signature(path), str(path))


def load_document(document: dict[str, Any], where: str) -> tuple[TaskSignature, Program]:
    """A signature document and its validated program; UserError (naming `where`) for
    anything wrong."""
    from pydantic import ValidationError

    from tunehub.compiler.errors import SignatureError
    from tunehub.compiler.program import load

    try:
        program = load(document)
        return TaskSignature.model_validate(document), program
    except (SignatureError, ValidationError) as exc:
        raise UserError(f"{where}: {exc}") from exc


def read_tasks(
    paths: Sequence[Path], weights_text: str | None
) -> list[tuple[str, dict[str, Any], float]]:
    """The signatures that `tune` and `submit` take, each with where it came from (for
    messages) and its weight: signature files weighted by `--weights`, or one task set
    (`tunehub extract`), whose tasks carry their weights."""
    from pydantic import ValidationError

    from tunehub.schemas.taskset import TaskSet

    documents = [read_signature(path) for path in paths]
    if not any("tasks" in document for document in documents):
        weights = parse_weights(weights_text, len(documents))
        return list(zip(map(str, paths), documents, weights, strict=True))
    if len(paths) > 1:
        raise UserError("a task set is tuned on its own: give it as the only file")
    if weights_text is not None:
        raise UserError("a task set carries its tasks' weights: leave --weights out")
    try:
        taskset = TaskSet.model_validate(documents[0])
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error.get("loc", ())) or "task set"
        raise UserError(f"{paths[0]}: invalid task set: {where}: {error['msg']}") from exc
    if not taskset.tasks:
        raise UserError(f"{paths[0]}: the task set has no tasks (see its left_out)")
    return [
        (f"{paths[0]}: task {n} ({task.signature.name})", task.signature.model_dump(), task.weight)
        for n, task in enumerate(taskset.tasks)
    ]


def parse_symbol_values(args: tuple[str, ...]) -> dict[str, list[int]]:
    """`("M=1,8,32", "N=4")` -> `{"M": [1, 8, 32], "N": [4]}`: every value to tune each symbol
    at. The one parser of `--symbol`; UserError for a malformed argument, a symbol given twice
    or a value listed twice (each would be a duplicate task)."""
    given: dict[str, list[int]] = {}
    for arg in args:
        name, sep, text = arg.partition("=")
        name = name.strip()
        items = [item.strip() for item in text.split(",")]
        if not sep or not name or not all(_INTEGER.fullmatch(item) for item in items):
            raise UserError(f"--symbol expects NAME=INTEGER[,INTEGER...], not {arg!r}")
        if name in given:
            raise UserError(f"--symbol {name} is given twice (list its values once: {name}=1,8)")
        values = [int(item) for item in items]
        if len(set(values)) < len(values):
            raise UserError(f"--symbol {arg!r} lists a value twice")
        given[name] = values
    return given


def parse_symbols(args: tuple[str, ...]) -> dict[str, int]:
    """`("M=64",)` -> `{"M": 64}`: one value per symbol, for the commands that name one kernel."""
    given = parse_symbol_values(args)
    for name, values in given.items():
        if len(values) > 1:
            raise UserError(f"--symbol {name} takes one value here, not a list")
    return {name: values[0] for name, values in given.items()}


def symbol_tasks(
    signatures: Sequence[TaskSignature], args: tuple[str, ...]
) -> list[tuple[int, dict[str, int]]]:
    """The tasks that signatures and `--symbol` lists make: `(index of the signature, symbol
    values)` per signature and per combination of the listed values of the symbols it declares
    (the cartesian product, in the order listed). A symbol goes to every signature declaring it;
    one that none declares, or a value outside a declared range, is a UserError. Symbols not
    listed are left out (the tuner's default)."""
    given = parse_symbol_values(args)
    declared = sorted({name for signature in signatures for name in signature.symbols})
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise UserError(
            f"unknown symbol {', '.join(unknown)} (declared: {', '.join(declared) or 'none'})"
        )
    tasks = []
    for index, signature in enumerate(signatures):
        names = [name for name in given if name in signature.symbols]
        for name in names:
            decl = signature.symbols[name]
            outside = [value for value in given[name] if not decl.min <= value <= decl.max]
            if outside:
                raise UserError(
                    f"{signature.name}: symbol {name}={outside[0]} is outside its range "
                    f"[{decl.min}, {decl.max}]"
                )
        for values in itertools.product(*(given[name] for name in names)):
            tasks.append((index, dict(zip(names, values, strict=True))))
    return tasks


# The naive config is every task's first trial: a task needs one more to leave it.
TRIALS_PER_TASK = 2


def warn_small_budget(trials: int, tasks: int) -> None:
    """Say on stderr when `trials` shared by `tasks` tasks cannot take every task past its
    naive config (16 trials over 18 tasks leave all at naive speed, two never tried)."""
    needed = TRIALS_PER_TASK * tasks
    if tasks > 1 and trials < needed:
        untried = f", {tasks - trials} never tried" if trials < tasks else ""
        click.echo(
            f"warning: {trials} trials over {tasks} tasks leave some at their naive "
            f"schedule{untried}: --trials {needed} or more tries one schedule beyond it in each",
            err=True,
        )


def parse_weights(text: str | None, n: int) -> list[float]:
    """`--weights 1,2` -> [1.0, 2.0], one positive number per signature (default all 1)."""
    if text is None:
        return [1.0] * n
    try:
        weights = [float(w) for w in text.split(",")]
    except ValueError as exc:
        raise UserError(f"--weights must be numbers separated by commas, not {text!r}") from exc
    if len(weights) != n:
        raise UserError(f"--weights has {len(weights)} values for {n} signature(s)")
    if not all(0 < w < math.inf for w in weights):  # NaN included
        raise UserError(f"--weights must be positive, not {text!r}")
    return weights


def symbols_text(symbols: Mapping[str, int]) -> str:
    """`{"M": 8, "N": 4}` -> `M=8, N=4`; `-` for none."""
    return ", ".join(f"{name}={value}" for name, value in symbols.items()) or "-"


def symbol_option(help_text: str, *, lists: bool = False) -> Callable[[F], F]:
    """`--symbol`, repeatable; `lists`: for the commands that tune every value listed."""
    metavar = "NAME=V1,V2,..." if lists else "NAME=VALUE"
    return click.option("--symbol", "symbol_args", multiple=True, metavar=metavar, help=help_text)


def show_dispatch(directory: Path, table: DispatchTable) -> None:
    """What `kernel --dispatch` and `download --dispatch` print once they wrote `directory`."""
    last = len(table.entries) - 1
    click.echo(f"wrote {directory}/ (dispatch.json and kernel directories k0/..k{last}/)")
    console().print(dispatch_table(table))
    for index, entry in enumerate(table.entries):
        if entry.fallback:
            click.echo(f"note: k{index}: {entry.fallback}")


def dispatch_table(table: DispatchTable) -> Table:
    """A dispatch table for people: each entry's tuned values, the values it serves (for a
    one-symbol workload), its latency at the tuned values and its artifact."""
    from tunehub.runtime.dispatch import served_ranges

    served = served_ranges(table)
    title = f"dispatch table of workload {table.workload_key[:12]} on {table.target}"
    columns = ("kernel", "tuned at", *(("serves",) if served else ()), "latency", "artifact")
    view = Table(*columns, title=title)
    for index, entry in enumerate(table.entries):
        serves = []
        if served:
            (symbol,) = table.ranges
            low, high = served[index]
            serves = [f"{symbol}={low}" if low == high else f"{symbol}={low}..{high}"]
        view.add_row(
            f"k{index}",
            symbols_text(entry.symbols),
            *serves,
            seconds(entry.record.latency_s),
            (entry.record.artifact_sha256 or "-")[:12],
        )
    return view


UNCUT_WIDTH = 1000  # columns of output that is not a terminal: a table is never cut to fit


def console(*, highlight: bool = True) -> Console:
    """Where the commands print their tables: a terminal's width, or when stdout is a file or
    a pipe as wide as the table needs (rich would cut it to 80 columns, "laye...")."""
    width = None if sys.stdout.isatty() else UNCUT_WIDTH
    return Console(highlight=highlight, width=width)


def seconds(value: float | None) -> str:
    """A duration for people: `1.23 ms`; `-` for none."""
    if value is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def one_line(text: str) -> str:
    return " ".join(text.split())
