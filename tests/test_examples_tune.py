"""Every shipped example tunes end to end, and its best kernel computes what the signature says.

For each `examples/*.json`: a real local tuning of 16 trials (Tuner + LocalExecutor, a SQLite
file, 2 threads), then the best kernel exported with `tunehub kernel`, loaded with
`client.load_kernel` and run on inputs of another seed than the tuning's, against the numpy
reference. The tuning verified each candidate on its own inputs; this checks the artifact a
user downloads, on data it never saw. For contractions the naive loop nest is measured too, as
the tuning's baseline, and the best is the fastest record the tuning kept. Whether the search
beats the baseline is a timing, measured in `bench/`, not asserted here: on a busy machine a
16-trial tuning of a small matmul can end with the baseline fastest.

Measurement effort is cut (3 timed batches of at least 2 ms), since nothing here depends on
precise latencies. The largest single cost is the naive 1024^3 matmul, a strided loop nest
that runs into the 20 s measurement limit on a small machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy.orm import Session, sessionmaker

from tunehub.client import load_kernel
from tunehub.client.cli import cli
from tunehub.compiler import reference
from tunehub.compiler.analysis import CONTRACTION, analyze
from tunehub.compiler.inputs import random_inputs
from tunehub.compiler.program import load
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Space
from tunehub.compiler.verify import compare, reduce_extent
from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.signature import TaskSignature
from tunehub.schemas.target import Target
from tunehub.server.db.records import list_records
from tunehub.server.db.session import make_engine, migrate, session_factory, session_scope
from tunehub.server.tuner import LocalExecutor, SearchPlan, Tuner, register_tuning, validate_task
from tunehub.server.tuner.confirmation import CONTENDERS

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.json"))
TRIALS = 16
THREADS = 2
STRATEGY = "model"  # the CLI's default
# int4_matmul is tuned at a small batch: its naive kernel at the default M=64 takes ~0.5 s.
SYMBOLS = {"int4_matmul": {"M": 8}}
CHECK_SEED = 12345  # the tuning's inputs use seed 0
# Measurement effort: nothing here needs precise latencies (see the module docstring).
REPEATS, MIN_REPEAT_S = 3, 0.002


@pytest.fixture(scope="module")
def executor() -> Iterator[LocalExecutor]:
    """One build pool for every example: starting one costs about a second."""
    with LocalExecutor(workers=THREADS) as executor:
        yield executor


@pytest.fixture
def database(tmp_path: Path) -> Iterator[tuple[str, sessionmaker[Session]]]:
    url = f"sqlite:///{tmp_path / 'tunehub.db'}"
    migrate(url)
    engine = make_engine(url)
    try:
        yield url, session_factory(engine)
    finally:
        engine.dispose()


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_tunes_and_its_best_kernel_matches_the_reference(
    path: Path,
    executor: LocalExecutor,
    database: tuple[str, sessionmaker[Session]],
    tmp_path: Path,
) -> None:
    url, sessions = database
    signature = TaskSignature.model_validate_json(path.read_text())
    program = load(signature)
    symbols = SYMBOLS.get(path.stem, {})
    target = executor.resolve(Target(kind="cpu"))
    with session_scope(sessions) as s:
        tuning_id = register_tuning(
            s, validate_task(signature, symbols), SearchPlan(STRATEGY, TRIALS), target=target
        )
    tuner = Tuner(sessions, executor, threads=THREADS, repeats=REPEATS, min_repeat_s=MIN_REPEAT_S)
    summary = tuner.run(tuning_id)

    assert summary.status == TuningStatus.DONE, summary.error
    assert summary.trials == TRIALS
    assert summary.best is not None
    with session_scope(sessions) as s:
        records = list_records(s, tuning_id=tuning_id, limit=None)
    # REPEATS repeats a measurement; the contenders were measured twice (`confirmation`).
    timed = [len(r.latencies_s) for r in records if r.status == RecordStatus.OK]
    assert all(n <= 2 * REPEATS for n in timed)
    assert sum(n > REPEATS for n in timed) <= CONTENDERS
    if any(stage.kind == CONTRACTION for stage in analyze(program).stages):
        naive_key = Space.key(space_for(program, target).naive())
        naive = next(r for r in records if r.config_key == naive_key)
        # The naive 1024^3 matmul (a strided loop nest) can outrun the 20 s measurement limit.
        assert naive.status in (RecordStatus.OK, RecordStatus.RUN_TIMEOUT), naive.error_log
        if naive.status == RecordStatus.OK:
            assert naive.latency_s == summary.baseline_latency_s
    fastest = min((r for r in records if r.status == RecordStatus.OK), key=lambda r: r.latency_s)
    assert summary.best.latency_s == fastest.latency_s

    out = tmp_path / "kernel"
    args = ["kernel", summary.workload_key, "--target", str(target), "-o", str(out)]
    args += ["--db", url, *(f"--symbol={k}={v}" for k, v in symbols.items())]
    exported = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert exported.exit_code == 0, exported.output
    assert json.loads((out / "metadata.json").read_text())["config"] == summary.best.config

    kernel = load_kernel(out)
    resolved = summary.symbols
    inputs = random_inputs(program, resolved, seed=CHECK_SEED)
    expected = reference.evaluate(program, inputs, resolved)
    got = kernel(*(inputs[t.name] for t in program.inputs), **resolved)
    outputs = got if isinstance(got, tuple) else (got,)
    for name, actual in zip(program.outputs, outputs, strict=True):
        dtype = program.compute(name).dtype
        extent = reduce_extent(program, name, resolved)
        result = compare(expected[name], actual, dtype, reduce_extent=extent)
        assert result.ok, f"{path.stem} {name}: {result.message}"
