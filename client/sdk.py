"""The Python client of a tunehub server: submit tunings, follow them, fetch the best kernels.

    with Client("http://127.0.0.1:8000", token="...") as hub:
        tuning = hub.submit(signature, target="cpu", trials=64)
        tuning = hub.wait(tuning.id)
        best = hub.best(tuning.workload_key, target=tuning.target)
        kernel = load_kernel(hub.download(best.artifact_sha256, "out/"))

It speaks the API's own models (`schemas.api`) and needs only them and httpx, so an
application can use it without the compiler, the workers or the server installed. Every error
response becomes an `ApiError` carrying the server's one-line `detail`; a server that cannot
be reached is a `ServerUnreachable`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from schemas.api import (
    DEFAULT_STRATEGY,
    BestRequest,
    Page,
    RecordView,
    Submission,
    TuningRequest,
    TuningView,
    WorkerView,
)
from schemas.record import RecordStatus, TuningStatus
from schemas.signature import TaskSignature
from schemas.target import Target

DEFAULT_SERVER = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 30.0
# `wait` polls every POLL_START_S at first (a cached or small tuning ends at once) and backs
# off by POLL_FACTOR up to POLL_MAX_S (a long tuning should not cost a request per 100 ms).
POLL_START_S = 0.1
POLL_FACTOR = 1.5
POLL_MAX_S = 2.0
FINISHED = frozenset({TuningStatus.DONE, TuningStatus.FAILED, TuningStatus.CANCELLED})
# What `download` writes: `kernel.<kind>` (kernel.so for CPU kernels, which
# `client.kernel.load_kernel` loads; kernel.cubin or kernel.ptx for GPUs) and the metadata.
METADATA = "metadata.json"

ViewT = TypeVar("ViewT", bound=BaseModel)
Task = TaskSignature | Mapping[str, Any]
TargetLike = Target | str


class ClientError(Exception):
    """Anything the client could not do, with a message meant for people."""


class ServerUnreachable(ClientError):
    """No answer from the server (refused, timed out, DNS)."""


class ApiError(ClientError):
    """The server answered with an error: `status_code` and its one-line `detail`."""

    def __init__(self, status_code: int, detail: str, method: str, path: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail


class NotFoundError(ApiError):
    """404: the tuning, workload, artifact or best kernel does not exist (yet)."""


class TuningTimeout(ClientError):
    """`wait` gave up before the tuning finished; `tuning` is the last view seen."""

    def __init__(self, tuning: TuningView, timeout_s: float) -> None:
        super().__init__(
            f"tuning {tuning.id} is still {tuning.status} after {timeout_s:g} s "
            f"({tuning.trials_done}/{tuning.trials_total} trials)"
        )
        self.tuning = tuning


class Client:
    """A connection to one tunehub server (`base_url`), with an optional API token.

    One httpx connection pool per client: reuse it, and close it (or use `with`).
    """

    def __init__(
        self,
        base_url: str = DEFAULT_SERVER,
        token: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
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
    ) -> Submission:
        """Ask for a tuning. The answer says whether it was `created`, `joined` an identical
        tuning already under way, or `cached` (the database held enough measurements: it is
        done already, and no trial runs)."""
        request = TuningRequest(
            task=_signature(task),
            target=_target(target),
            trials=trials,
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
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        delay = POLL_START_S
        while True:
            tuning = self.get(tuning_id)
            if on_progress is not None:
                on_progress(tuning)
            if tuning.status in FINISHED:
                return tuning
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    assert timeout_s is not None
                    raise TuningTimeout(tuning, timeout_s)
                delay = min(delay, left)
            time.sleep(delay)
            delay = min(delay * POLL_FACTOR, POLL_MAX_S)

    def cancel(self, tuning_id: int) -> TuningView:
        """Cancel a queued or running tuning (an admin token's right: a tuning is shared by
        everyone who submitted it)."""
        return self._view(TuningView, "POST", f"/v1/tunings/{tuning_id}/cancel")

    # Workloads and kernels

    def best(
        self,
        key: str | None = None,
        *,
        task: Task | None = None,
        target: TargetLike = "cpu",
        symbols: Mapping[str, int] | None = None,
    ) -> RecordView:
        """The fastest verified record of a workload, named by its `key` or by its signature
        (`task`), for `target` (`cpu` alone: any ISA). Symbols left out take the tuner's
        defaults; `symbols=None` with a key means any values. `NotFoundError` when none."""
        if (key is None) == (task is None):
            raise ValueError("name the workload by its key or by its signature (task), not both")
        if task is not None:
            request = BestRequest(
                task=_signature(task),
                target=_target(target),
                symbols=None if symbols is None else dict(symbols),
            )
            return self._view(RecordView, "POST", "/v1/workloads/best", json=_body(request))
        params = {"target": str(_target(target)), "symbol": _symbol_params(symbols)}
        return self._view(RecordView, "GET", f"/v1/workloads/{key}/best", params=params)

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
        params: dict[str, Any] = {"limit": page_size, "symbol": _symbol_params(symbols)}
        if target is not None:
            params["target"] = str(_target(target))
        if status is not None:
            params["status"] = str(RecordStatus(status))
        offset: int | None = 0
        while offset is not None:
            page = self._view(
                Page[RecordView],
                "GET",
                f"/v1/workloads/{key}/records",
                params={**params, "offset": offset},
            )
            yield from page.items
            offset = page.next_offset

    def download(
        self,
        ref: str,
        directory: str | Path,
        *,
        target: TargetLike = "cpu",
        symbols: Mapping[str, int] | None = None,
    ) -> Path:
        """Write a kernel directory that `client.load_kernel` loads: `ref` is an artifact's
        sha256, or a workload key whose best kernel for `target` (and `symbols`) is fetched.
        The bytes are checked against their content address before anything is written."""
        record = None
        try:
            meta = self._json("GET", f"/v1/artifacts/{ref}/meta")
            sha256 = ref
        except NotFoundError:  # not an artifact: a workload key, then
            try:
                record = self.best(ref, target=target, symbols=symbols)
            except NotFoundError as exc:
                if not exc.detail.startswith("no workload"):
                    raise
                path = f"/v1/artifacts/{ref}"
                raise NotFoundError(404, f"no artifact or workload {ref}", "GET", path) from None
            if record.artifact_sha256 is None:
                raise ClientError(f"record {record.id} has no artifact") from None
            sha256 = record.artifact_sha256
            meta = self._json("GET", f"/v1/artifacts/{sha256}/meta")
        response = self._request("GET", f"/v1/artifacts/{sha256}")
        data = response.content
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ClientError(f"artifact {sha256} arrived corrupted (its sha256 differs)")
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
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        (out / _file_name(response)).write_bytes(data)
        (out / METADATA).write_text(json.dumps(metadata, indent=2) + "\n")
        return out

    def workers(self) -> list[WorkerView]:
        """The living worker daemons (none when the server has no Redis)."""
        return TypeAdapter(list[WorkerView]).validate_python(self._json("GET", "/v1/workers"))

    # Plumbing

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
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerUnreachable(
                f"cannot reach the tunehub server at {self.base_url}: {exc or type(exc).__name__}"
            ) from None
        if response.is_success:
            return response
        error = NotFoundError if response.status_code == 404 else ApiError
        raise error(response.status_code, _detail(response), method, path)


def _signature(task: Task) -> TaskSignature:
    return task if isinstance(task, TaskSignature) else TaskSignature.model_validate(task)


def _target(target: TargetLike) -> Target:
    return Target.parse(target) if isinstance(target, str) else target


def _body(request: BaseModel) -> Any:
    # exclude_none: the wire format leaves optional fields out (a target's missing ISA).
    return request.model_dump(mode="json", exclude_none=True)


def _symbol_params(symbols: Mapping[str, int] | None) -> list[str]:
    return [f"{name}={value}" for name, value in (symbols or {}).items()]


def _file_name(response: httpx.Response) -> str:
    """`kernel.<kind>`, the kind from the artifact's `<sha256>.<kind>` attachment name."""
    disposition = response.headers.get("content-disposition", "")
    kind = disposition.rpartition(".")[2].strip('"; ')
    return f"kernel.{kind}" if kind.isalnum() else "kernel.bin"


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
