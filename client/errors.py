"""What the SDK raises: `ClientError` and its kinds, each with a message meant for people.

Every error response becomes an `ApiError` carrying the server's one-line `detail` (a 404 a
`NotFoundError`); a server that cannot be reached is a `ServerUnreachable`; `wait` giving up
is a `TuningTimeout`.
"""

from __future__ import annotations

from tunehub.schemas.api import TuningGroupView, TuningView


class ClientError(Exception):
    """Anything the client could not do, with a message meant for people."""


class ServerUnreachable(ClientError):
    """No answer from the server (refused, timed out, DNS)."""


class ApiError(ClientError):
    """The server answered with an error: `status_code` and its one-line `detail`."""

    def __init__(
        self, status_code: int, detail: str, method: str, path: str, note: str = ""
    ) -> None:
        super().__init__(f"{method} {path}: HTTP {status_code}: {detail}{note}")
        self.status_code = status_code
        self.detail = detail
        self.method = method
        self.path = path


class NotFoundError(ApiError):
    """404: the tuning, workload, artifact or best kernel does not exist (yet)."""


class TuningTimeout(ClientError):
    """`wait` (or `wait_group`) gave up before the tuning (or group) finished; `tuning` is the
    last view seen."""

    def __init__(self, tuning: TuningView | TuningGroupView, timeout_s: float) -> None:
        what = "tuning group" if isinstance(tuning, TuningGroupView) else "tuning"
        super().__init__(
            f"{what} {tuning.id} is still {tuning.status} after {timeout_s:g} s "
            f"({tuning.trials_done}/{tuning.trials_total} trials)"
        )
        self.tuning = tuning
