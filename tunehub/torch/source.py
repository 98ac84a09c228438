"""Where `optimize` finds tuned kernels: a tunehub server (its URL) or a tuning database (a
path or a database URL), asked for a workload's dispatch table on one target.

Either way a workload's kernels are written to a local directory as `tunehub kernel
--dispatch` writes them (`runtime.dispatch`), then loaded from there: one loading path, and
a dispatch table even for a workload without symbols (one entry).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from tunehub.runtime.dispatch import DispatchKernel, KernelFiles, load_dispatch, save_dispatch
from tunehub.schemas.dispatch import DispatchTable


class NoKernel(Exception):
    """No verified kernel of a workload on the target, with the reason for the report."""


class KernelSource:
    """Tuned kernels of `source` (`http(s)://...`: a server; anything else: a database path
    or SQLAlchemy URL) for `target`, written under `directory` (a temporary one by default)."""

    def __init__(
        self, source: str | Path, target: str, directory: str | Path | None = None
    ) -> None:
        self.source = str(source)
        self.target = target
        self.directory = Path(directory or tempfile.mkdtemp(prefix="tunehub-torch-"))
        self._loaded: dict[str, DispatchKernel | NoKernel] = {}

    @property
    def remote(self) -> bool:
        return self.source.startswith(("http://", "https://"))

    def kernel(self, key: str) -> DispatchKernel:
        """The dispatch kernel of workload `key`; NoKernel when there is none."""
        if key not in self._loaded:
            try:
                table, files = self._server(key) if self.remote else self._database(key)
                directory = save_dispatch(self.directory / key, table, files)
                self._loaded[key] = load_dispatch(directory)
            except NoKernel as exc:
                self._loaded[key] = exc
        found = self._loaded[key]
        if isinstance(found, NoKernel):
            raise found
        return found

    def _server(self, key: str) -> tuple[DispatchTable, list[KernelFiles]]:
        from tunehub.client.errors import ClientError, NotFoundError
        from tunehub.client.sdk import Client, kernel_metadata

        try:
            with Client(self.source) as hub:
                table = hub.dispatch(key, target=self.target)
                files: list[KernelFiles] = []
                for entry in table.entries:
                    sha = entry.record.artifact_sha256
                    if sha is None:
                        raise NoKernel(f"record {entry.record.id} has no artifact")
                    artifact = hub.artifact(sha, workload=key)
                    files.append((artifact.data, None, kernel_metadata(artifact.meta, sha, None)))
        except NotFoundError as exc:
            raise NoKernel(f"no verified kernel in {self.source}: {exc.detail}") from None
        except ClientError as exc:
            raise NoKernel(f"{self.source}: {exc}") from None
        return table, files

    def _database(self, key: str) -> tuple[DispatchTable, list[KernelFiles]]:
        from tunehub.schemas.target import Target
        from tunehub.server.best import dispatch_table
        from tunehub.server.db.session import make_engine, session_factory, session_scope

        sessions = session_factory(make_engine(_database_url(self.source)))
        with session_scope(sessions) as s:
            table = dispatch_table(s, key, Target.parse(self.target))
            if table is None:
                raise NoKernel(f"no verified kernel in the database for {self.target}")
            files = [_stored(s, key, entry.record.artifact_sha256) for entry in table.entries]
        return table, files


def _stored(s: Any, key: str, sha: str | None) -> KernelFiles:
    """The files of artifact `sha` as workload `key`'s kernel (`server.kernels`)."""
    from tunehub.client.sdk import kernel_metadata
    from tunehub.server.db.artifacts import get_artifact
    from tunehub.server.kernels import kernel_meta

    artifact = get_artifact(s, sha) if sha else None
    if artifact is None:
        raise NoKernel(f"artifact {sha} is missing from the database")
    meta = kernel_meta(s, artifact, key)
    return artifact.data, artifact.source, kernel_metadata(meta, artifact.sha256, None)


def _database_url(source: str) -> str:
    """A database path as an SQLite URL; a URL as it is."""
    if "://" in source:
        return source
    path = Path(source).expanduser()
    if not path.is_file():
        raise NoKernel(f"no database at {path}")
    return f"sqlite:///{path.resolve()}"
