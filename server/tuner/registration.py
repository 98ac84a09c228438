"""Registering a tuning: the request checked for everything a tuning could fail on late, its
workload stored and the tuning created in the database, queued: the committed row is what a
tuner daemon claims (`server.submit`, `server.tuner.lease`), or `tunehub tune` runs it at once.
"""

from __future__ import annotations

from collections.abc import Mapping

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


def register_tuning(
    s: Session,
    *,
    signature: TaskSignature,
    target: Target,
    symbols: Mapping[str, int],
    trials: int,
    strategy: str,
    group_id: int | None = None,
    weight: float | None = None,
    time_limit_s: float | None = None,
) -> int:
    """Register a tuning request (workload upserted, tuning queued) and return its id; a
    group's member names its group and its weight there.

    Validates everything a tuning could fail on late: the program, the strategy name and the
    symbol values (SignatureError / ValueError with a one-line message).
    """
    program = load(signature)
    if strategy not in search.STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (one of {', '.join(search.STRATEGIES)})")
    if trials < 1:
        raise ValueError(f"trials must be at least 1, not {trials}")
    if time_limit_s is not None and not time_limit_s > 0:
        raise ValueError(f"a time limit must be positive, not {time_limit_s}")
    key = workload_key(program)
    resolved = resolve_symbols(program, symbols)
    # The signature as submitted (not the canonical form): the tuner loads it back. A later
    # submitter's symbol names may differ; the tuning uses the stored signature's.
    upsert_workload(s, key=key, name=signature.name, signature=signature.model_dump())
    tuning = create_tuning(
        s,
        workload_key=key,
        target=target,
        symbols=workload_symbols(s, key, resolved),
        trials=trials,
        strategy=strategy,
        group_id=group_id,
        weight=weight,
        time_limit_s=time_limit_s,
    )
    return tuning.id
