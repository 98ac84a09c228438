"""The wire format of the HTTP API (`/v1`): request bodies and the views the server answers with.

The client SDK builds on these models, so they depend on nothing but `schemas`. Every error the
API answers is `{"detail": "<one line>"}` (`ErrorView`), whatever its status code.

Targets travel as their short text (`cpu:x86_64-avx512`, `cuda:sm_90`); a request may also
send the object form (`{"kind": "cuda", "arch": "sm_90"}`), and may leave the ISA or arch out
(`cpu`, `cuda`) to mean whatever the living workers of that kind have.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict

from tunehub.schemas.record import UNKNOWN_DEVICE, RecordStatus, TuningStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.schemas.text import Label, LabelKey

# Paging: `limit` defaults to DEFAULT_PAGE_SIZE and may not exceed MAX_PAGE_SIZE.
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
# Ids and offsets fit a 32-bit signed integer (PostgreSQL's `integer`); larger values can name
# nothing, and are refused before they reach the database.
MAX_ID = 2**31 - 1
SHA256_PATTERN = r"^[0-9a-f]{64}$"


# A symbolic workload is tuned for one assignment of its symbols; a symbol nobody named is
# tuned at this value (clamped into its declared range): large enough to exercise tiling,
# small enough that the naive baseline finishes quickly.
DEFAULT_SYMBOL_VALUE = 64
# The most tasks one tuning group may hold (a whole model's distinct layers, with room).
MAX_GROUP_TASKS = 64


class StrategyName(StrEnum):
    """The search strategies a tuning may name: the one list of them. `compiler.search`
    implements each under its name here (`STRATEGIES` is keyed by these)."""

    EVOLUTIONARY = "evolutionary"
    MODEL = "model"
    RANDOM = "random"


# The names as plain strings (a CLI's choices, the API document's enum), and the strategy a
# tuning uses unless the request names one.
STRATEGY_NAMES = tuple(name.value for name in StrategyName)
DEFAULT_STRATEGY = StrategyName.MODEL.value


class Scope(StrEnum):
    """What an API token may do; each scope includes the ones before it.

    read: every lookup (`POST /v1/workloads/best` included); submit: also `POST /v1/tunings`
    and `POST /v1/tuning-groups`; admin: also cancelling tunings and groups (a tuning is shared
    by everyone who submitted it).
    """

    READ = "read"
    SUBMIT = "submit"
    ADMIN = "admin"

    def allows(self, needed: Scope) -> bool:
        order = list(Scope)
        return order.index(self) >= order.index(needed)


def _target(value: Any) -> Any:
    return Target.parse(value) if isinstance(value, str) else value


# A target in a request: the short text or the object form.
TargetField = Annotated[Target, BeforeValidator(_target, json_schema_input_type=str | Target)]
# Counts and symbol values are JSON integers, never strings or booleans coerced into them.
StrictInt = Annotated[int, Strict()]
Symbols = Annotated[dict[LabelKey, StrictInt], Field(max_length=8)]
# A wall-clock budget beside the trials: the tuner stops at the first batch boundary after it
# (at most a week: a longer one is a mistake, not a budget).
MAX_TIME_LIMIT_S = 7 * 24 * 3600.0
TimeLimit = Annotated[
    float | None,
    Field(
        gt=0,
        le=MAX_TIME_LIMIT_S,
        description="seconds of wall-clock time the tuning may take, beside its trials",
    ),
]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _View(BaseModel):
    # `from_attributes`: the server builds views straight from its database rows.
    model_config = ConfigDict(from_attributes=True, frozen=True)


class TuningRequest(_Request):
    """`POST /v1/tunings`: tune `task` for `target` with a budget of `trials` candidates.

    `symbols` names the symbol values to tune for (a symbol left out is tuned at 64, clamped
    into its range). The server caps `trials` (its `max_trials` setting: 422 above it).
    """

    task: TaskSignature
    target: TargetField
    trials: StrictInt = Field(ge=1)
    time_limit_s: TimeLimit = None
    symbols: Symbols = Field(default_factory=dict)
    strategy: Label = Field(
        default=DEFAULT_STRATEGY,
        max_length=64,
        # Checked by the server, with its own message; the document names the choices.
        json_schema_extra={"enum": list(STRATEGY_NAMES)},
    )


class GroupTask(_Request):
    """One task of a `TuningGroupRequest`: a signature, the symbol values to tune it for (as in
    `TuningRequest`), and its weight: how many times the task runs per model call, so that the
    group's budget goes where it cuts the model's total latency most."""

    task: TaskSignature
    symbols: Symbols = Field(default_factory=dict)
    weight: float = Field(default=1.0, gt=0, le=1e6)


class TuningGroupRequest(_Request):
    """`POST /v1/tuning-groups`: tune every task for `target` with one budget of `trials`
    shared by all (the server caps it at its `max_trials` times the number of tasks).

    A task repeated with other symbol values is its own task (dynamic shapes: tune the values
    a dispatch table should cover); the same task twice with the same values is refused.
    """

    tasks: list[GroupTask] = Field(min_length=1, max_length=MAX_GROUP_TASKS)
    target: TargetField
    trials: StrictInt = Field(ge=1)
    time_limit_s: TimeLimit = None
    strategy: Label = Field(
        default=DEFAULT_STRATEGY,
        max_length=64,
        # Checked by the server, with its own message; the document names the choices.
        json_schema_extra={"enum": list(STRATEGY_NAMES)},
    )


class BestRequest(_Request):
    """`POST /v1/workloads/best`: the best kernel of a signature, without computing its key.

    `symbols` as in `TuningRequest`; left out entirely, it means any symbol values.
    """

    task: TaskSignature
    target: TargetField
    symbols: Symbols | None = None
    device: Label | None = Field(
        default=None, max_length=255, description="the caller's device model, preferred"
    )


class RecordView(_View):
    """One measured (or failed) candidate. Only `ok` records carry a verified artifact."""

    id: int
    workload_key: str
    target: str
    symbols: dict[str, int]
    tuning_id: int | None
    config: dict[str, Any]
    status: RecordStatus
    latency_s: float | None
    latencies_s: list[float]
    build_time_s: float | None
    max_error: float | None
    error_log: str | None
    machine: dict[str, Any]
    device: str = Field(default=UNKNOWN_DEVICE, description="the device model it ran on")
    driver: str | None = None
    toolkit: str | None = None
    artifact_sha256: str | None
    created_at: datetime


class BestView(RecordView):
    """A best-kernel answer: the record, and why it was measured on another device model than
    the one the caller asked for (None when it was not, or no device was given)."""

    fallback: str | None = None


class WorkloadView(_View):
    """A workload: its key, the name it was first submitted under, and when."""

    key: str
    name: str
    created_at: datetime


class TuningView(_View):
    """A tuning and its progress. `best` is the best verified record of its workload, target
    and symbols so far (from every tuning of them, not only this one: the kernel a client
    would get)."""

    id: int
    workload_key: str
    target: str
    symbols: dict[str, int]
    strategy: str
    status: TuningStatus
    trials_done: int
    trials_total: int
    time_limit_s: float | None = None
    stop_reason: str | None = Field(
        default=None, description="why it ended before its trials (a time limit, the space)"
    )
    best: RecordView | None
    error: str | None
    stalled: str | None = Field(
        default=None,
        description="why its tuner cannot advance it now (the database refuses writes: "
        "its disk full, read-only, unreachable); None once it advances",
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class Submission(TuningView):
    """The answer to `POST /v1/tunings`, with what the server did about the request:

    - `created`: a tuning was queued (202): a new one, or a failed or cancelled one of the same
      task and budget, resumed;
    - `joined`: the same workload, target and symbols were already queued or running, and that
      tuning is returned (202);
    - `cached`: the database already holds at least `trials` measurements of them, so no new
      trial runs; the answer is the newest done tuning of them, or one recorded as done at
      once when there is none (200).
    """

    outcome: Literal["created", "joined", "cached"]


class TuningGroupView(_View):
    """A tuning group: one tuning per task, in request order, run on one shared budget.

    `status` follows the members: queued until one starts, running while any is unfinished,
    then failed if any failed, else cancelled if any was cancelled, else done. `trials_done`
    is the members' sum; `error`, of a failed or cancelled group, the first member's error.
    """

    id: int
    target: str
    strategy: str
    status: TuningStatus
    trials_done: int
    trials_total: int
    time_limit_s: float | None = None
    weights: list[float]
    tunings: list[TuningView]
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class WorkerView(_View):
    """A living worker daemon, as its last heartbeat registered it."""

    name: str
    host: str
    machine: str
    slot: str | None = Field(
        default=None, description="the device it measures on alone (`cuda:1`), if a slot"
    )
    pid: int
    queues: list[str]
    targets: list[str]
    threads: int
    fingerprints: dict[str, dict[str, Any]]
    started_at: datetime
    last_heartbeat: datetime


ItemT = TypeVar("ItemT")


class Page(BaseModel, Generic[ItemT]):
    """One page of a listing; `next_offset` is None on the last page."""

    items: list[ItemT]
    limit: int
    offset: int
    next_offset: int | None


class ReadyView(BaseModel):
    """`/readyz`: each dependency's state, `ok` or why not (Redis may be `disabled`)."""

    ready: bool
    database: str
    redis: str


class ErrorView(BaseModel):
    """Every error response."""

    detail: str
