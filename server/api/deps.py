"""Dependencies of the routes, as `Annotated` aliases: the app's services, a database session,
the rows a path names (404 when they do not exist, in one place), and parsed query values.
Access control (`ReadAccess`, ...) lives in `server.api.auth`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from redis import Redis
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from tunehub.schemas.api import DEFAULT_PAGE_SIZE, MAX_ID, MAX_PAGE_SIZE, SHA256_PATTERN
from tunehub.schemas.target import TARGET_LENGTH, Target
from tunehub.schemas.text import Label
from tunehub.server.api.metrics import Metrics
from tunehub.server.api.verifier import TokenVerifier
from tunehub.server.best_cache import BestLookup
from tunehub.server.db import artifacts, groups, tunings, workloads
from tunehub.server.db.models import Artifact, Tuning, TuningGroup, Workload
from tunehub.server.db.session import session_scope
from tunehub.server.errors import InvalidRequest, NotFound
from tunehub.server.health import WriteProbe
from tunehub.server.settings import Settings
from tunehub.server.stalls import Stalls


@dataclass(frozen=True)
class Services:
    """What the routes use, built once per app by `create_app` (`app.state.services`)."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    redis: Redis | None  # None: no TUNEHUB_REDIS_URL (no workers, no queued tunings)
    best: BestLookup
    tokens: TokenVerifier
    metrics: Metrics
    write_probe: WriteProbe
    stalls: Stalls | None  # None without Redis


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def get_session(services: ServicesDep) -> Iterator[Session]:
    """One transaction per request, committed before the response is sent (`scope`)."""
    with session_scope(services.sessions) as s:
        yield s


SessionDep = Annotated[Session, Depends(get_session, scope="function")]

# Path parameters: ids within the database's integer range, lowercase sha256 hex keys.
TuningId = Annotated[int, Path(ge=1, le=MAX_ID)]
GroupId = Annotated[int, Path(ge=1, le=MAX_ID)]
WorkloadKey = Annotated[str, Path(pattern=SHA256_PATTERN)]
Sha256 = Annotated[str, Path(pattern=SHA256_PATTERN)]
WorkloadKeyQuery = Annotated[str | None, Query(pattern=SHA256_PATTERN)]


def get_tuning(tuning_id: TuningId, s: SessionDep) -> Tuning:
    tuning = tunings.get_tuning(s, tuning_id)
    if tuning is None:
        raise NotFound(f"no tuning {tuning_id}")
    return tuning


def get_group(group_id: GroupId, s: SessionDep) -> TuningGroup:
    group = groups.get_group(s, group_id)
    if group is None:
        raise NotFound(f"no tuning group {group_id}")
    return group


def get_workload(key: WorkloadKey, s: SessionDep) -> Workload:
    workload = workloads.get_workload(s, key)
    if workload is None:
        raise NotFound(f"no workload {key}")
    return workload


def get_artifact(sha256: Sha256, s: SessionDep) -> Artifact:
    artifact = artifacts.get_artifact(s, sha256)
    if artifact is None:
        raise NotFound(f"no artifact {sha256}")
    return artifact


TuningDep = Annotated[Tuning, Depends(get_tuning, scope="function")]
GroupDep = Annotated[TuningGroup, Depends(get_group, scope="function")]
WorkloadDep = Annotated[Workload, Depends(get_workload, scope="function")]
ArtifactDep = Annotated[Artifact, Depends(get_artifact, scope="function")]


@dataclass(frozen=True)
class PageParams:
    limit: int
    offset: int


def page_params(
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> PageParams:
    return PageParams(limit, offset)


PageDep = Annotated[PageParams, Depends(page_params)]


TARGET_HELP = "cpu[:ISA] or cuda[:sm_XX]; without ISA/arch: any of that kind"
SYMBOL_PATTERN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]{0,63})=(-?[0-9]{1,12})$")


def _parse_target(text: str) -> Target:
    try:
        return Target.parse(text)
    except ValueError as exc:
        raise InvalidRequest(f"target: {exc}") from None


def required_target(
    target: Annotated[str, Query(max_length=TARGET_LENGTH, description=TARGET_HELP)],
) -> Target:
    return _parse_target(target)


def optional_target(
    target: Annotated[str | None, Query(max_length=TARGET_LENGTH, description=TARGET_HELP)] = None,
) -> Target | None:
    return None if target is None else _parse_target(target)


def symbols_query(
    symbol: Annotated[
        list[str] | None,
        Query(max_length=8, description="NAME=VALUE, once per symbol (default: any values)"),
    ] = None,
) -> dict[str, int] | None:
    """`?symbol=M=128&symbol=N=64` as `{"M": 128, "N": 64}`; None when there is none."""
    if not symbol:
        return None
    values: dict[str, int] = {}
    for item in symbol:
        match = SYMBOL_PATTERN.match(item)
        if match is None:
            raise InvalidRequest(f"symbol: expected NAME=VALUE with an integer value, not {item!r}")
        values[match[1]] = int(match[2])
    return values


TargetDep = Annotated[Target, Depends(required_target)]
OptionalTargetDep = Annotated[Target | None, Depends(optional_target)]
SymbolsDep = Annotated[dict[str, int] | None, Depends(symbols_query)]
DeviceDep = Annotated[
    Label | None,
    Query(
        max_length=255,
        description="the caller's device model (a GPU's or CPU's name): preferred, else any",
    ),
]
