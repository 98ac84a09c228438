"""The Python client of a tunehub server: submit tunings, follow them, fetch the best kernels.

    with Client("http://127.0.0.1:8000", token="...") as hub:
        tuning = hub.submit(signature, target="cpu", trials=64)
        tuning = hub.wait(tuning.id)
        best = hub.best(tuning.workload_key, target=tuning.target)
        kernel = load_kernel(hub.download(tuning.workload_key, "out/"))

A whole model's layers share one budget as a group of tasks (one per layer, or per tuned value
of a symbol), and a symbolic workload's tuned values make a dispatch table:

        tasks = [GroupTask(task=layer, symbols={"M": m}) for m in (1, 8, 32)]
        group = hub.wait_group(hub.submit_group(tasks, target="cpu", trials=256).id)
        table = hub.dispatch(group.tunings[0].workload_key, target=group.target)

It speaks the API's own models (`schemas.api`) and needs only them and httpx, so an
application can use it without the compiler, the workers or the server installed. Every error
response becomes an `ApiError` carrying the server's one-line `detail`; a server that cannot
be reached is a `ServerUnreachable` (`client.errors`). Short outages are ridden out: a request
that never reached the server, or a lookup (GET) that lost its connection or met a gateway
error, is sent again for up to `retry_s` seconds (`client.retry` says when), so `wait`
outlives an API restart.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from tunehub.client.errors import (
    ApiError,
    ClientError,
    NotFoundError,
    ServerUnreachable,
    TuningTimeout,
)
from tunehub.client.retry import (
    IDEMPOTENT,
    RETRY_MAX_DELAY_S,
    RETRY_START_S,
    RETRY_STATUSES,
    default_retry_s,
    gave_up,
    retry_after,
)
from tunehub.schemas.api import (
    DEFAULT_STRATEGY,
    SHA256_PATTERN,
    BestRequest,
    BestView,
    GroupTask,
    Page,
    RecordView,
    Submission,
    TuningGroupRequest,
    TuningGroupView,
    TuningRequest,
    TuningView,
    WorkerView,
    WorkloadView,
)
from tunehub.schemas.dispatch import DispatchTable
from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.records import ImportSummary
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target

DEFAULT_SERVER = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 30.0
# A records file goes to `POST /v1/records` in batches of about this size (the server refuses
# bodies over its `max_body_bytes`, 1 MiB by default).
IMPORT_BATCH_BYTES = 512 * 1024
# `wait` polls every POLL_START_S at first (a cached or small tuning ends at once) and backs
# off by POLL_FACTOR up to POLL_MAX_S (a long tuning should not cost a request per 100 ms).
POLL_START_S = 0.1
POLL_FACTOR = 1.5
POLL_MAX_S = 2.0
FINISHED = frozenset({TuningStatus.DONE, TuningStatus.FAILED, TuningStatus.CANCELLED})
# What `download` writes: `kernel.<kind>` (kernel.so for CPU kernels, which
# `runtime.load_kernel` loads; kernel.cubin or kernel.ptx for GPUs) and the metadata.
METADATA = "metadata.json"

ViewT = TypeVar("ViewT", bound=BaseModel)
# What `wait` and `wait_group` poll: anything with an id, a status and a trial count.
PolledT = TypeVar("PolledT", TuningView, TuningGroupView)
Task = TaskSignature | Mapping[str, Any]
TargetLike = Target | str


@dataclass(frozen=True)
class Artifact:
    """A compiled kernel as the server keeps it: `data` (a shared object, cubin or PTX, as
    `kind` says) and the `meta` of its `metadata.json` (entry point, arguments, launch)."""

    sha256: str
    data: bytes
    meta: dict[str, Any]
    kind: str


def kernel_metadata(
    meta: Mapping[str, Any], sha256: str, record: RecordView | None
) -> dict[str, Any]:
    """The `metadata.json` of an exported kernel: the artifact's own, and where it came from
    (the record it was measured as: workload, target, tuned symbols, latency, config)."""
    metadata = {**meta, "artifact_sha256": sha256}
    if record is not None:
        metadata |= {
            "workload_key": record.workload_key,
            "target": record.target,
            "tuned_symbols": record.symbols,
            "latency_s": record.latency_s,
            "config": record.config,
            "record_id": record.id,
        }
    return metadata


class Client:
    """A connection to one tunehub server (`base_url`), with an optional API token.

    One httpx connection pool per client: reuse it, and close it (or use `with`). `retry_s`:
    how long a request rides out an outage (default: TUNEHUB_RETRY_S, else 30 s; 0: never).
    """

    def __init__(
        self,
        base_url: str = DEFAULT_SERVER,
        token: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry_s: float | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry_s = default_retry_s() if retry_s is None else max(0.0, retry_s)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # Tunings

    def submit(
        self,
        task: Task,
        *,
        target: TargetLike = "cpu",
        trials: int = 64,
        symbols: Mapping[str, int] | None = None,
        strategy: str = DEFAULT_STRATEGY,
        time_limit_s: float | None = None,
    ) -> Submission:
        """Ask for a tuning (of at most `trials` and, if given, `time_limit_s` seconds). The
        answer says whether it was `created`, `joined` an identical tuning already under way,
        or `cached` (the database held enough measurements: it is done already, and no trial
        runs)."""
        request = TuningRequest(
            task=_signature(task),
            target=_target(target),
            trials=trials,
            time_limit_s=time_limit_s,
            symbols=dict(symbols or {}),
            strategy=strategy,
        )
        return self._view(Submission, "POST", "/v1/tunings", json=_body(request))

    def get(self, tuning_id: int) -> TuningView:
        """The tuning as it stands now."""
        return self._view(TuningView, "GET", f"/v1/tunings/{tuning_id}")

    def wait(
        self,
        tuning_id: int,
        *,
        timeout_s: float | None = None,
        on_progress: Callable[[TuningView], None] | None = None,
    ) -> TuningView:
        """Poll until the tuning is done, failed or cancelled, and return it (check its
        `status`: a failed tuning is not an exception). `on_progress` sees every view polled,
        the last included. Raises `TuningTimeout` after `timeout_s` (default: no limit)."""
        return self._poll(self.get, tuning_id, timeout_s, on_progress)

    def tunings(
        self, *, status: TuningStatus | str | None = None, page_size: int = 50
    ) -> Iterator[TuningView]:
        """Every tuning, newest first (only those with `status`, if given), a page at a time."""
        params: dict[str, Any] = {} if status is None else {"status": str(TuningStatus(status))}
        return self._pages(TuningView, "/v1/tunings", params, page_size)

    def cancel(self, tuning_id: int) -> TuningView:
        """Cancel a queued or running tuning (an admin token's right: a tuning is shared by
        everyone who submitted it)."""
        return self._view(TuningView, "POST", f"/v1/tunings/{tuning_id}/cancel")

    # Groups: several tasks (a model's layers, a symbol's values) on one trial budget

    def submit_group(
        self,
        tasks: Sequence[GroupTask],
        *,
        target: TargetLike = "cpu",
        trials: int = 64,
        strategy: str = DEFAULT_STRATEGY,
        time_limit_s: float | None = None,
    ) -> TuningGroupView:
        """Tune several tasks on one budget of `trials` in all: each batch goes to the task
        expected to cut the weighted total latency most (a task's `weight`: how many times the
        model runs it), and a task that stops improving stops early. Each task is a tuning of
        its own (`tunings`, in request order), so `best` and `dispatch` see its results."""
        request = TuningGroupRequest(
            tasks=list(tasks),
            target=_target(target),
            trials=trials,
            strategy=strategy,
            time_limit_s=time_limit_s,
        )
        return self._view(TuningGroupView, "POST", "/v1/tuning-groups", json=_body(request))

    def group(self, group_id: int) -> TuningGroupView:
        """The group as it stands now, with each task's tuning."""
        return self._view(TuningGroupView, "GET", f"/v1/tuning-groups/{group_id}")

    def groups(
        self, *, status: TuningStatus | str | None = None, page_size: int = 50
    ) -> Iterator[TuningGroupView]:
        """Every group, newest first (only those with `status`, if given), a page at a time."""
        params: dict[str, Any] = {} if status is None else {"status": str(TuningStatus(status))}
        return self._pages(TuningGroupView, "/v1/tuning-groups", params, page_size)

    def wait_group(
        self,
        group_id: int,
        *,
        timeout_s: float | None = None,
        on_progress: Callable[[TuningGroupView], None] | None = None,
    ) -> TuningGroupView:
        """`wait` for a group: poll until it is done, failed or cancelled."""
        return self._poll(self.group, group_id, timeout_s, on_progress)

    def cancel_group(self, group_id: int) -> TuningGroupView:
        """Cancel a group's unfinished tunings (an admin token's right, as for a tuning)."""
        return self._view(TuningGroupView, "POST", f"/v1/tuning-groups/{group_id}/cancel")

    # Workloads and kernels

    def workloads(self, *, page_size: int = 50) -> Iterator[WorkloadView]:
        """Every workload, newest first, a page at a time."""
        return self._pages(WorkloadView, "/v1/workloads", {}, page_size)

    def workload_key(self, prefix: str) -> str:
        """The key of the one workload whose key starts with `prefix` (a whole key is returned
        as it is); ValueError when none does or several do."""
        if re.fullmatch(SHA256_PATTERN, prefix):
            return prefix
        if not re.fullmatch(r"[0-9a-fA-F]{1,63}", prefix):
            raise ValueError(f"{prefix!r} is not a workload key (hexadecimal)")
        params = {"prefix": prefix.lower(), "limit": 2}
        found = self._view(Page[WorkloadView], "GET", "/v1/workloads", params=params).items
        if not found:
            raise ValueError(f"no workload has a key starting with {prefix!r}")
        if len(found) > 1:
            shown = ", ".join(w.key[:16] for w in found)
            raise ValueError(
                f"workload key {prefix!r} is ambiguous ({shown}, ...): give more of it"
            )
        return found[0].key

    def best(
        self,
        key: str | None = None,
        *,
        task: Task | None = None,
        target: TargetLike = "cpu",
        symbols: Mapping[str, int] | None = None,
        device: str | None = None,
    ) -> BestView:
        """The fastest verified record of a workload, named by its `key` or by its signature
        (`task`), for `target` (`cpu` alone: any ISA). Symbols left out take the tuner's
        defaults; `symbols=None` with a key means any values. With `device` (a GPU's or
        CPU's model name), one measured on that model if any; else `fallback` says why not.
        `NotFoundError` when none."""
        if (key is None) == (task is None):
            raise ValueError("name the workload by its key or by its signature (task), not both")
        if task is not None:
            request = BestRequest(
                task=_signature(task),
                target=_target(target),
                symbols=None if symbols is None else dict(symbols),
                device=device,
            )
            return self._view(BestView, "POST", "/v1/workloads/best", json=_body(request))
        assert key is not None  # one of the two, checked above
        params = {"target": str(_target(target)), "symbol": _symbol_params(symbols)}
        if device is not None:
            params["device"] = device
        path = f"/v1/workloads/{self.workload_key(key)}/best"
        return self._view(BestView, "GET", path, params=params)

    def records(
        self,
        key: str,
        *,
        target: TargetLike | None = None,
        status: RecordStatus | str | None = None,
        symbols: Mapping[str, int] | None = None,
        page_size: int = 200,
    ) -> Iterator[RecordView]:
        """Every record of workload `key`, oldest first, failures included (filter them by
        `status`), fetched a page at a time as the iterator is consumed."""
        params: dict[str, Any] = {"symbol": _symbol_params(symbols)}
        if target is not None:
            params["target"] = str(_target(target))
        if status is not None:
            params["status"] = str(RecordStatus(status))
        return self._pages(RecordView, f"/v1/workloads/{key}/records", params, page_size)

    def dispatch(
        self, key: str, *, target: TargetLike = "cpu", device: str | None = None
    ) -> DispatchTable:
        """The dispatch table of symbolic workload `key` on `target`: the best kernel of every
        symbol assignment it was tuned at, and `select` to pick one for any values in the
        declared ranges; with `device`, each entry measured on that model where one was.
        `NotFoundError` when no assignment has a verified kernel."""
        params = {"target": str(_target(target))}
        if device is not None:
            params["device"] = device
        path = f"/v1/workloads/{self.workload_key(key)}/dispatch"
        return self._view(DispatchTable, "GET", path, params=params)

    def artifact(self, sha256: str, *, workload: str | None = None) -> Artifact:
        """A compiled kernel by its content address: its bytes, checked against the address,
        and its metadata, with the arguments of `workload` (the key of a workload it is a
        kernel of; several may share the bytes). `NotFoundError` when the server has no such
        artifact, or it is not a kernel of that workload."""
        params = {} if workload is None else {"workload": workload}
        meta = self._json("GET", f"/v1/artifacts/{sha256}/meta", params=params)
        response = self._request("GET", f"/v1/artifacts/{sha256}")
        data = response.content
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ClientError(f"artifact {sha256} arrived corrupted (its sha256 differs)")
        return Artifact(sha256, data, meta, _kind(response))

    def download(
        self,
        ref: str,
        directory: str | Path,
        *,
        target: TargetLike = "cpu",
        symbols: Mapping[str, int] | None = None,
        device: str | None = None,
    ) -> Path:
        """Write a kernel directory that `client.load_kernel` loads: `ref` is an artifact's
        sha256, or a workload key (or a unique prefix of one) whose best kernel for `target`
        (and `symbols`) is fetched. The bytes are checked against their content address
        before anything is written."""
        record = None
        try:
            if not re.fullmatch(SHA256_PATTERN, ref):
                raise NotFoundError(404, "not a whole sha256", "GET", f"/v1/artifacts/{ref}")
            artifact = self.artifact(ref)
        except NotFoundError:  # not an artifact: a workload key, then
            try:
                record = self.best(ref, target=target, symbols=symbols, device=device)
            except NotFoundError as exc:
                if not exc.detail.startswith("no workload"):
                    raise
                path = f"/v1/artifacts/{ref}"
                raise NotFoundError(404, f"no artifact or workload {ref}", "GET", path) from None
            if record.artifact_sha256 is None:
                raise ClientError(f"record {record.id} has no artifact") from None
            artifact = self.artifact(record.artifact_sha256, workload=record.workload_key)
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"kernel.{artifact.kind}").write_bytes(artifact.data)
        metadata = kernel_metadata(artifact.meta, artifact.sha256, record)
        (out / METADATA).write_text(json.dumps(metadata, indent=2) + "\n")
        return out

    def import_records(
        self, lines: Iterable[str], *, batch_bytes: int = IMPORT_BATCH_BYTES
    ) -> ImportSummary:
        """Send a records file (`schemas.records`, its lines without newlines) to the server's
        database (an admin token's right), in batches of about `batch_bytes` each (under the
        server's body limit), each batch with the file's header, in order: a batch's records
        may name workloads and artifacts an earlier batch stored. Each batch is stored whole
        or not at all; sending again after a failure skips what is stored."""
        header: str | None = None
        batch: list[str] = []
        size = 0
        total: dict[str, int] = {}

        def send() -> None:
            if batch:
                body = "\n".join([header or "", *batch]) + "\n"
                headers = {"Content-Type": "application/x-ndjson"}
                summary = self._view(
                    ImportSummary, "POST", "/v1/records", content=body, headers=headers
                )
                for name, count in summary.model_dump().items():
                    total[name] = total.get(name, 0) + count

        for line in lines:
            if header is None:
                header = line  # the server refuses a file that does not start with one
                continue
            if batch and size + len(line) > batch_bytes:
                send()
                batch, size = [], 0
            batch.append(line)
            size += len(line) + 1
        send()
        return ImportSummary(**total)

    def workers(self) -> list[WorkerView]:
        """The living worker daemons (none when the server has no Redis)."""
        return TypeAdapter(list[WorkerView]).validate_python(self._json("GET", "/v1/workers"))

    # Plumbing

    def _poll(
        self,
        fetch: Callable[[int], PolledT],
        ident: int,
        timeout_s: float | None,
        on_progress: Callable[[PolledT], None] | None,
    ) -> PolledT:
        """`fetch(ident)` until it is finished, backing off from POLL_START_S to POLL_MAX_S."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        delay = POLL_START_S
        while True:
            view = fetch(ident)
            if on_progress is not None:
                on_progress(view)
            if view.status in FINISHED:
                return view
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    assert timeout_s is not None
                    raise TuningTimeout(view, timeout_s)
                delay = min(delay, left)
            time.sleep(delay)
            delay = min(delay * POLL_FACTOR, POLL_MAX_S)

    def _pages(
        self, model: type[ViewT], path: str, params: dict[str, Any], page_size: int
    ) -> Iterator[ViewT]:
        """Every item of a paged listing, fetched a page at a time as the iterator is consumed."""
        offset: int | None = 0
        while offset is not None:
            page = self._view(
                Page[model],  # type: ignore[valid-type]
                "GET",
                path,
                params={**params, "limit": page_size, "offset": offset},
            )
            yield from page.items
            offset = page.next_offset

    def _view(self, model: type[ViewT], method: str, path: str, **kwargs: Any) -> ViewT:
        payload = self._json(method, path, **kwargs)
        try:
            return model.model_validate(payload)
        except ValidationError as exc:
            raise ClientError(
                f"{method} {path}: unexpected answer from {self.base_url} "
                f"(a server of another version?): {exc.errors()[0]['msg']}"
            ) from None

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._request(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise ClientError(f"{method} {path}: the answer is not JSON") from None

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, sent again through an outage (`client.retry` says when)."""
        started = time.monotonic()
        delay = RETRY_START_S
        tries = 0
        while True:
            tries += 1
            wait = delay
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                # Not connected: nothing was sent, and anything may be sent again.
                unsent = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))
                again = unsent or method in IDEMPOTENT
                reason = f"cannot reach the tunehub server at {self.base_url}: "
                failure: ClientError = ServerUnreachable(reason + (str(exc) or type(exc).__name__))
            else:
                if response.is_success:
                    return response
                again = response.status_code in RETRY_STATUSES and method in IDEMPOTENT
                wait = max(delay, retry_after(response))
                error = NotFoundError if response.status_code == 404 else ApiError
                failure = error(response.status_code, _detail(response), method, path)
            left = self.retry_s - (time.monotonic() - started)
            if not again or left <= 0:
                raise gave_up(failure, tries, time.monotonic() - started) from None
            time.sleep(min(wait, left))
            delay = min(delay * 2, RETRY_MAX_DELAY_S)


def _signature(task: Task) -> TaskSignature:
    return task if isinstance(task, TaskSignature) else TaskSignature.model_validate(task)


def _target(target: TargetLike) -> Target:
    return Target.parse(target) if isinstance(target, str) else target


def _body(request: BaseModel) -> Any:
    # exclude_none: the wire format leaves optional fields out (a target's missing ISA).
    return request.model_dump(mode="json", exclude_none=True)


def _symbol_params(symbols: Mapping[str, int] | None) -> list[str]:
    return [f"{name}={value}" for name, value in (symbols or {}).items()]


def _kind(response: httpx.Response) -> str:
    """The kind from the artifact's `<sha256>.<kind>` attachment name (`bin` when unnamed)."""
    disposition = response.headers.get("content-disposition", "")
    kind = disposition.rpartition(".")[2].strip('"; ')
    return kind if kind.isalnum() else "bin"


def _detail(response: httpx.Response) -> str:
    """The server's `detail`, or the start of whatever else it answered (a proxy's page)."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, str) and detail:
        return detail
    text = " ".join(response.text.split())[:200]
    return text or response.reason_phrase
