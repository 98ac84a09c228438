"""Registering a tuning: the request checked once for everything a tuning could fail on late
(`validate_task`, `SearchPlan`), then its workload stored and the tuning created in the
database, queued, from what was checked (`register_tuning`): the committed row is what a tuner
daemon claims (`server.submit`, `server.tuner.lease`), or `tunehub tune` runs it at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy.orm import Session

from tunehub.compiler import search
from tunehub.compiler.canonical import workload_key
from tunehub.compiler.ir import Program
from tunehub.compiler.program import load
from tunehub.schemas.api import DEFAULT_SYMBOL_VALUE
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.db.tunings import create_tuning
from tunehub.server.db.workloads import upsert_workload, workload_symbols


def resolve_symbols(program: Program, given: Mapping[str, int]) -> dict[str, int]:
    """The symbol values to tune for: `given`, checked against the declared ranges, with every
    symbol not given at DEFAULT_SYMBOL_VALUE (clamped). Raises ValueError on a bad name/value."""
    declared = {s.name: s for s in program.symbols}
    unknown = set(given) - set(declared)
    if unknown:
        names = ", ".join(declared) or "none"
        raise ValueError(f"unknown symbol {', '.join(sorted(unknown))} (declared: {names})")
    values = {}
    for name, sym in declared.items():
        value = given.get(name, min(max(DEFAULT_SYMBOL_VALUE, sym.min), sym.max))
        if not sym.min <= value <= sym.max:
            raise ValueError(f"symbol {name}={value} is outside its range [{sym.min}, {sym.max}]")
        values[name] = value
    return values


@dataclass(frozen=True)
class ValidTask:
    """A task a tuning can run, as `validate_task` found it: the signature as submitted, its
    workload key and the symbol values to tune for (every symbol, defaults filled in)."""

    signature: TaskSignature
    key: str
    symbols: dict[str, int]


def validate_task(signature: TaskSignature, symbols: Mapping[str, int]) -> ValidTask:
    """`signature`'s program loaded (SignatureError) and `symbols` resolved against it
    (ValueError, `resolve_symbols`), once: what is found is passed on, never loaded again."""
    program = load(signature)
    return ValidTask(signature, workload_key(program), resolve_symbols(program, symbols))


@dataclass(frozen=True)
class SearchPlan:
    """How a tuning searches: its strategy and budget (`trials`, and `time_limit_s` seconds of
    wall-clock time if given), checked when made (ValueError with a one-line message)."""

    strategy: str
    trials: int
    time_limit_s: float | None = None

    def __post_init__(self) -> None:
        if self.strategy not in search.STRATEGIES:
            choices = ", ".join(sorted(search.STRATEGIES))
            raise ValueError(f"unknown strategy {self.strategy!r} (one of {choices})")
        if self.trials < 1:
            raise ValueError(f"trials must be at least 1, not {self.trials}")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ValueError(f"a time limit must be positive, not {self.time_limit_s}")


def register_tuning(
    s: Session,
    task: ValidTask,
    plan: SearchPlan,
    *,
    target: Target,
    group_id: int | None = None,
    weight: float | None = None,
) -> int:
    """Register a validated tuning request (workload upserted, tuning queued) and return its
    id; a group's member names its group and its weight there."""
    # The signature as submitted (not the canonical form): the tuner loads it back. A later
    # submitter's symbol names may differ; the tuning uses the stored signature's.
    upsert_workload(
        s, key=task.key, name=task.signature.name, signature=task.signature.model_dump()
    )
    tuning = create_tuning(
        s,
        workload_key=task.key,
        target=target,
        symbols=workload_symbols(s, task.key, task.symbols),
        trials=plan.trials,
        strategy=plan.strategy,
        group_id=group_id,
        weight=weight,
        time_limit_s=plan.time_limit_s,
    )
    return tuning.id
