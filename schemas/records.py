"""The records file: a tuning database's measurements as JSON lines, to move them between
databases (`tunehub records export|import`, `tunehub push`, `POST /v1/records`).

Every line is one JSON object with a `type`. The first is the header, naming the format and
its version; then the workloads (each with its signature), the artifacts (each kernel's bytes,
base64, with its source and metadata) and the records (each naming its workload, target,
device, config, features and their version, every timed repeat, its status and error log, and
its artifact by sha256). A record carries everything it had in the database but its id and its
tuning (both local to that database), so a file imported and exported again is the same file.
Files concatenate: a later header line is allowed, and an importer skips what it already has.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints

from tunehub.schemas.api import SHA256_PATTERN
from tunehub.schemas.record import RecordStatus
from tunehub.schemas.target import TARGET_LENGTH
from tunehub.schemas.text import FreeText, JsonObject, Label, LabelKey

FORMAT = "tunehub-records"  # as `HeaderLine.format`
# Bump on any change to the lines below; an importer refuses a version it does not know.
VERSION = 1

Sha256 = Annotated[str, StringConstraints(pattern=SHA256_PATTERN)]


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HeaderLine(_Line):
    type: Literal["header"] = "header"
    format: Literal["tunehub-records"] = "tunehub-records"
    version: int = VERSION


class WorkloadLine(_Line):
    type: Literal["workload"] = "workload"
    key: Sha256
    name: Label = Field(max_length=255)
    signature: JsonObject


class ArtifactLine(_Line):
    type: Literal["artifact"] = "artifact"
    sha256: Sha256
    kind: Label = Field(max_length=16)
    data: str  # base64 of the bytes
    source: FreeText | None
    meta: JsonObject


class RecordLine(_Line):
    type: Literal["record"] = "record"
    workload_key: Sha256
    target: Label = Field(max_length=TARGET_LENGTH)
    device: Label = Field(max_length=255)
    driver: Label | None = Field(max_length=64)
    toolkit: Label | None = Field(max_length=64)
    symbols: dict[LabelKey, int]
    config: JsonObject
    features: list[float]
    feature_version: int
    status: RecordStatus
    latency_s: float | None
    latencies_s: list[float]
    build_time_s: float | None
    max_error: float | None
    error_log: FreeText | None
    machine: JsonObject
    artifact_sha256: Sha256 | None
    created_at: AwareDatetime


Line = Annotated[HeaderLine | WorkloadLine | ArtifactLine | RecordLine, Field(discriminator="type")]


class ImportSummary(BaseModel):
    """What an import stored and what it already had (`POST /v1/records` answers with it)."""

    model_config = ConfigDict(frozen=True)

    workloads: int = 0
    artifacts: int = 0
    records: int = 0
    duplicates: int = Field(default=0, description="records skipped: already stored")
