"""Records files (`schemas.records`): a database's measurements written out, and read into
another database, merged with what it holds.

An import is checked before it stores anything it depends on: every workload's key is the hash
of its signature, every artifact's bytes hash to their address, every record names a workload
and an artifact the file (or the database) holds and the device its fingerprint names. A
record already stored under the same workload, target, device, symbol values and config is
skipped, so importing a file twice, or files that overlap, adds each measurement once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence

from pydantic import TypeAdapter, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tunehub.compiler.canonical import workload_key
from tunehub.compiler.program import load
from tunehub.compiler.space.space import Space
from tunehub.schemas.records import (
    FORMAT,
    VERSION,
    ArtifactLine,
    HeaderLine,
    ImportSummary,
    Line,
    RecordLine,
    WorkloadLine,
)
from tunehub.schemas.target import Target
from tunehub.server.db.artifacts import get_artifact, put_artifact
from tunehub.server.db.models import Artifact, Record, Workload
from tunehub.server.db.records import NewRecord, add_record, device_identity
from tunehub.server.db.session import session_scope
from tunehub.server.db.sql import canonical_json
from tunehub.server.db.workloads import get_workload, upsert_workload
from tunehub.server.errors import InvalidRequest
from tunehub.server.generations import BestGenerations

_LINE: TypeAdapter[Line] = TypeAdapter(Line)
# How every record line of an exported file starts (`dump` puts the type first).
RECORD_LINE_START = '{"type":"record",'
# How many rows an export reads from the database at a time.
_BATCH = 200


def export_lines(s: Session, workload_keys: Sequence[str] | None = None) -> Iterator[str]:
    """The records file of the workloads `workload_keys` (all of them: None), line by line
    without their newlines: the header, the workloads, the artifacts their records name, the
    records in the order they were stored."""
    return map(dump, _export(s, workload_keys))


def dump(line: Line) -> str:
    """A line's one text: its type first, then every key sorted at every level, so that the
    same content is the same text whichever database it was read from (PostgreSQL's JSONB
    keeps keys in its own order)."""
    value = line.model_dump(mode="json")
    kind = json.dumps(value.pop("type"))
    rest = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return '{"type":' + kind + "," + rest[1:]


def _export(s: Session, workload_keys: Sequence[str] | None) -> Iterator[Line]:
    yield HeaderLine()
    workloads = select(Workload).order_by(Workload.key)
    records = select(Record).order_by(Record.id)
    shas = select(Record.artifact_sha256).where(Record.artifact_sha256.is_not(None))
    if workload_keys is not None:
        workloads = workloads.where(Workload.key.in_(workload_keys))
        records = records.where(Record.workload_key.in_(workload_keys))
        shas = shas.where(Record.workload_key.in_(workload_keys))
    for workload in s.scalars(workloads.execution_options(yield_per=_BATCH)):
        yield WorkloadLine(key=workload.key, name=workload.name, signature=workload.signature)
    artifacts = select(Artifact).where(Artifact.sha256.in_(shas.distinct()))
    for artifact in s.scalars(artifacts.order_by(Artifact.sha256).execution_options(yield_per=1)):
        yield ArtifactLine(
            sha256=artifact.sha256,
            kind=artifact.kind,
            data=base64.b64encode(artifact.data).decode("ascii"),
            source=artifact.source,
            meta=artifact.meta,
        )
    for record in s.scalars(records.execution_options(yield_per=_BATCH)):
        yield _record_line(record)


def _record_line(record: Record) -> RecordLine:
    return RecordLine(
        workload_key=record.workload_key,
        target=record.target,
        device=record.device,
        driver=record.driver,
        toolkit=record.toolkit,
        symbols=record.symbols,
        config=record.config,
        features=record.features,
        feature_version=record.feature_version,
        status=record.status,
        latency_s=record.latency_s,
        latencies_s=record.latencies_s,
        build_time_s=record.build_time_s,
        max_error=record.max_error,
        error_log=record.error_log,
        machine=record.machine,
        artifact_sha256=record.artifact_sha256,
        created_at=record.created_at,
    )


def parse_lines(lines: Iterable[str | bytes]) -> list[Line]:
    """The lines of a records file, validated; `InvalidRequest` naming the first bad line.
    Blank lines are skipped; the first line must be a header of a version this reads."""
    parsed: list[Line] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            line = _LINE.validate_json(text)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error.get("loc", ()))
            detail = f"{where}: {error['msg']}" if where else error["msg"]
            raise InvalidRequest(f"line {number}: {detail}") from None
        if not parsed and not isinstance(line, HeaderLine):
            raise InvalidRequest(f"line {number}: not a records file (no {FORMAT} header)")
        if isinstance(line, HeaderLine) and line.version != VERSION:
            raise InvalidRequest(
                f"line {number}: records format version {line.version}; this tunehub reads "
                f"version {VERSION}"
            )
        parsed.append(line)
    if not parsed:
        raise InvalidRequest(f"empty records file (no {FORMAT} header)")
    return parsed


def import_lines(s: Session, lines: Sequence[Line]) -> ImportSummary:
    """Store the workloads, artifacts and records of `lines` (`parse_lines`) that `s`'s
    database lacks, in the caller's transaction; `InvalidRequest` for a line that does not
    hold together (the caller rolls back: nothing of the file is stored)."""
    counts = {"workloads": 0, "artifacts": 0, "records": 0, "duplicates": 0}
    stored: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
    for number, line in enumerate(lines, start=1):
        if isinstance(line, WorkloadLine):
            counts["workloads"] += _import_workload(s, line, number)
        elif isinstance(line, ArtifactLine):
            counts["artifacts"] += _import_artifact(s, line, number)
        elif isinstance(line, RecordLine):
            added = _import_record(s, line, number, stored)
            counts["records" if added else "duplicates"] += 1
    return ImportSummary(**counts)


def _import_workload(s: Session, line: WorkloadLine, number: int) -> int:
    try:
        key = workload_key(load(line.signature))
    except ValueError as exc:  # SignatureError included
        raise InvalidRequest(f"line {number}: workload {line.key[:12]}: {exc}") from None
    if key != line.key:
        raise InvalidRequest(
            f"line {number}: workload {line.key[:12]}: its signature's key is {key[:12]}"
        )
    if get_workload(s, key) is not None:
        return 0
    upsert_workload(s, key=key, name=line.name, signature=line.signature)
    return 1


def _import_artifact(s: Session, line: ArtifactLine, number: int) -> int:
    try:
        data = base64.b64decode(line.data, validate=True)
    except binascii.Error:
        raise InvalidRequest(
            f"line {number}: artifact {line.sha256[:12]}: data is not base64"
        ) from None
    if hashlib.sha256(data).hexdigest() != line.sha256:
        raise InvalidRequest(
            f"line {number}: artifact {line.sha256[:12]}: its bytes hash to another sha256"
        )
    if get_artifact(s, line.sha256) is not None:
        return 0
    put_artifact(s, data=data, kind=line.kind, source=line.source, meta=line.meta)
    return 1


def _import_record(
    s: Session,
    line: RecordLine,
    number: int,
    stored: dict[tuple[str, str], set[tuple[str, str, str]]],
) -> bool:
    """Add the record of `line` unless its key is among `stored` (the keys of the records of
    its workload and target, read once per pair); whether it was added."""
    where = f"line {number}: record of workload {line.workload_key[:12]}"
    if get_workload(s, line.workload_key) is None:
        raise InvalidRequest(f"{where}: the workload is neither in the file before it nor stored")
    if line.artifact_sha256 is not None and get_artifact(s, line.artifact_sha256) is None:
        raise InvalidRequest(
            f"{where}: artifact {line.artifact_sha256[:12]} is neither in the file before it "
            "nor stored"
        )
    try:
        complete = Target.parse(line.target).complete
    except ValueError as exc:
        raise InvalidRequest(f"{where}: {exc}") from None
    if not complete:
        raise InvalidRequest(f"{where}: a record needs a complete target, not {line.target!r}")
    if device_identity(line.machine) != (line.device, line.driver, line.toolkit):
        raise InvalidRequest(f"{where}: its device is not the one its fingerprint names")
    pair = (line.workload_key, line.target)
    if pair not in stored:
        stored[pair] = _record_keys(s, *pair)
    config_key = Space.key(line.config)
    key = (canonical_json(line.symbols), line.device, config_key)
    if key in stored[pair]:
        return False
    new = NewRecord(
        workload_key=line.workload_key,
        target=line.target,
        symbols=line.symbols,
        tuning_id=None,
        config=line.config,
        config_key=config_key,
        features=line.features,
        feature_version=line.feature_version,
        status=line.status,
        latency_s=line.latency_s,
        latencies_s=line.latencies_s,
        build_time_s=line.build_time_s,
        max_error=line.max_error,
        error_log=line.error_log,
        machine=line.machine,
        artifact_sha256=line.artifact_sha256,
        created_at=line.created_at,
    )
    try:
        add_record(s, new)
    except ValueError as exc:
        raise InvalidRequest(f"{where}: {exc}") from None
    stored[pair].add(key)
    return True


def _record_keys(s: Session, workload: str, target: str) -> set[tuple[str, str, str]]:
    """(symbols, device, config) of every record of `workload` on `target`: what makes a
    record the same measurement as another."""
    query = select(Record.symbols_key, Record.device, Record.config_key).where(
        Record.workload_key == workload, Record.target == target
    )
    return {(symbols, device, config) for symbols, device, config in s.execute(query)}


def import_records(
    sessions: sessionmaker[Session],
    lines: Iterable[str | bytes],
    generations: BestGenerations | None = None,
) -> ImportSummary:
    """Parse and import a records file in one transaction (all of it or, on an error, none),
    then tell best-kernel caches (`generations`) that its workloads may have a new best."""
    parsed = parse_lines(lines)
    with session_scope(sessions) as s:
        summary = import_lines(s, parsed)
    if generations is not None and summary.records:
        for key in {line.workload_key for line in parsed if isinstance(line, RecordLine)}:
            generations.bump(key)
    return summary
