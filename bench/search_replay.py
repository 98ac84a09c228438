"""Search strategies replayed offline against spaces measured once.

    python bench/search_replay.py measure                 # a few hundred configs per workload
    python bench/search_replay.py remeasure               # a second session, keep the faster
    python bench/search_replay.py replay --seeds 20       # strategies x seeds, report + plot

`measure` draws configs uniformly from each workload's schedule space (the naive config first,
as the tuner does), builds and times them with the real builder and measurer
(`worker.jobs.run_batch`, one thread) and appends them to `bench/data/<workload>.json`: config,
features, status, median latency. It resumes where a file stops, so it can run in the
background in pieces. On a shared machine other jobs slow some measurements down (up to 3x
on the 2-core development box), so `remeasure` times every config again at another time and
keeps the faster session (both stay in the file, and the report says how much they differ).

`replay` runs every strategy as the tuner does (the naive config first, then batches of 8,
propose -> "measure" -> notify) over a space restricted to the measured configs, where a
measurement is a lookup: sampling draws from them and a mutation moves to a nearest measured
config (fewest knobs changed). It reports the trials each strategy needs to come within 5% and
1% of the best measured config (median over seeds), the ranking quality of the model and of
the roofline estimate on held-out records (Kendall tau, top-k recall), and writes
docs/benchmarks/search_replay-<date>.md with a convergence plot (.svg) beside it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine import describe_machine, git_commit  # noqa: E402
from tunehub.compiler import features, search  # noqa: E402
from tunehub.compiler.cost_model import (  # noqa: E402
    XGBModel,
    kendall_tau,
    normalized_throughput,
    roofline,
    top_k_recall,
)
from tunehub.compiler.cost_model.xgb_model import Objective  # noqa: E402
from tunehub.compiler.program import load  # noqa: E402
from tunehub.compiler.search import Guide, RandomSearch, SearchStrategy, TrainingSet  # noqa: E402
from tunehub.compiler.space import space_for  # noqa: E402
from tunehub.compiler.space.space import Config, Space  # noqa: E402
from tunehub.schemas.record import RecordStatus  # noqa: E402
from tunehub.schemas.target import Target  # noqa: E402
from tunehub.worker import device  # noqa: E402
from tunehub.worker.jobs import CandidateRequest, CandidateResult, run_batch  # noqa: E402

DATA = ROOT / "bench" / "data"
THREADS = 1
MEASURE_BATCH = 8
BATCH = 8  # the tuner's default batch on a 2-core machine


@dataclass(frozen=True)
class Workload:
    """A replay space: an example signature tuned at fixed symbol values."""

    name: str
    example: str
    symbols: dict[str, int]


WORKLOADS = (
    Workload("matmul_512", "matmul_512", {}),
    Workload("conv2d_3x3", "conv2d_3x3", {}),
    Workload("int4_matmul_m8", "int4_matmul", {"M": 8}),
)


def _signature(workload: Workload) -> dict[str, Any]:
    signature: dict[str, Any] = json.loads(
        (ROOT / "examples" / f"{workload.example}.json").read_text()
    )
    return signature


def data_path(workload: Workload) -> Path:
    return DATA / f"{workload.name}.json"


def _rounded(vector: dict[str, float]) -> list[float]:
    return [float(f"{v:.6g}") for v in vector.values()]


def _write(path: Path, data: dict[str, Any]) -> None:
    """Replace the file at once: an interrupted measurement leaves the previous batch."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")))
    os.replace(tmp, path)


def measure(workload: Workload, count: int, seed: int) -> None:
    """Measure configs of `workload` until its data file holds `count` of them."""
    path = data_path(workload)
    signature = _signature(workload)
    program = load(json.dumps(signature))
    target = Target(kind="cpu", isa=device.cpu_isa())
    space = space_for(program, target)
    data: dict[str, Any] = (
        current_features(workload, json.loads(path.read_text()))
        if path.exists()
        else {
            "workload": workload.name,
            "example": workload.example,
            "symbols": workload.symbols,
            "target": str(target),
            "threads": THREADS,
            "machine": describe_machine(),
            "commit": git_commit(),
            "date": datetime.date.today().isoformat(),
            "feature_version": features.FEATURE_VERSION,
            "feature_names": features.feature_names(),
            "records": [],
        }
    )
    records: list[dict[str, Any]] = data["records"]
    known = [(r["config"], r["latency_s"]) for r in records]
    sampler = RandomSearch(space, seed=seed, known=known)
    pending = [naive] if sampler.take(naive := space.naive()) else []
    while len(records) < count:
        n = min(MEASURE_BATCH, count - len(records))
        batch, pending = pending + sampler.propose(n - len(pending)), []
        for config, result in zip(batch, _run(workload, target, batch), strict=True):
            vector = result.features or features.extract(program, target, config, workload.symbols)
            records.append(
                {
                    "config": config,
                    "status": str(result.status),
                    "latency_s": result.latency_s if result.status is RecordStatus.OK else None,
                    "features": _rounded(vector),
                }
            )
        _write(path, data)
        best = min((r["latency_s"] for r in records if r["latency_s"] is not None), default=None)
        print(f"{workload.name}: {len(records)}/{count} measured, best {best}", flush=True)


def current_features(workload: Workload, data: dict[str, Any]) -> dict[str, Any]:
    """A data file's contents with features of this FEATURE_VERSION: recomputed from the
    configs (features are pure functions of them) and written back when the file holds
    another version's, so every reader sees the same rounded vectors."""
    if data["feature_version"] == features.FEATURE_VERSION:
        return data
    program = load(json.dumps(_signature(workload)))
    target = Target.parse(data["target"])
    for record in data["records"]:
        vector = features.extract(program, target, record["config"], workload.symbols)
        record["features"] = _rounded(vector)
    data.update(feature_version=features.FEATURE_VERSION, feature_names=features.feature_names())
    _write(data_path(workload), data)
    return data


def _run(workload: Workload, target: Target, configs: list[Config]) -> list[CandidateResult]:
    """Build (in parallel) and measure (one at a time) with the worker's own job functions."""
    requests = [
        CandidateRequest(
            signature=_signature(workload),
            target=target.model_dump(),
            config=config,
            symbols=workload.symbols,
            threads=THREADS,
        )
        for config in configs
    ]
    return run_batch(requests)


def remeasure(workload: Workload, sessions: int) -> None:
    """Measure every config again until each has `sessions` measurements, and keep the
    fastest: other jobs on a shared machine only ever slow a kernel down, so the minimum over
    sessions at different times is the better estimate of its own speed."""
    path = data_path(workload)
    data = json.loads(path.read_text())
    target = Target.parse(data["target"])
    records = data["records"]
    todo = [
        r
        for r in records
        if r["latency_s"] is not None
        and len(r.setdefault("sessions_s", [r["latency_s"]])) < sessions
    ]
    for start in range(0, len(todo), MEASURE_BATCH):
        batch = todo[start : start + MEASURE_BATCH]
        for record, result in zip(
            batch, _run(workload, target, [r["config"] for r in batch]), strict=True
        ):
            record["sessions_s"].append(
                result.latency_s if result.status is RecordStatus.OK else None
            )
            record["latency_s"] = min(t for t in record["sessions_s"] if t is not None)
        data.pop("recheck", None)  # an earlier spot check, superseded by the sessions
        _write(path, data)
        print(f"{workload.name}: {start + len(batch)}/{len(todo)} re-measured", flush=True)
    print(f"{workload.name}: {noise(data)}", flush=True)


def noise(data: dict[str, Any]) -> str:
    """How much the sessions of a space's measurements disagree."""
    pairs = [
        (a, b)
        for r in data["records"]
        if len(sessions := r.get("sessions_s", [])) > 1
        for a, b in [sessions[:2]]
        if a is not None and b is not None
    ]
    if not pairs:
        return "measured once"
    ratios = np.array([b / a for a, b in pairs])
    return (
        f"{len(pairs)} configs measured in two sessions: the second / the first is "
        f"{np.median(ratios):.2f} in the median, and differs by more than 10% for "
        f"{np.mean(np.abs(ratios - 1) > 0.1):.0%} of them "
        f"(at most {ratios.max():.2f} slower, {1 / ratios.min():.2f} faster)"
    )


# ----------------------------------------------------------------------------- replay


@dataclass
class Pool:
    """A measured space: configs in measurement order, latency (None: failed), features."""

    workload: Workload
    space: Space
    configs: list[Config]
    latencies: list[float | None]
    features: np.ndarray

    @property
    def best(self) -> float:
        return min(t for t in self.latencies if t is not None)

    def within(self, tolerance: float) -> int:
        return sum(t is not None and t <= self.best * (1 + tolerance) for t in self.latencies)


def load_pool(workload: Workload) -> Pool:
    """The workload's measured configs, with features of this FEATURE_VERSION."""
    data = current_features(workload, json.loads(data_path(workload).read_text()))
    program = load(json.dumps(_signature(workload)))
    records = data["records"]
    return Pool(
        workload,
        space_for(program, Target.parse(data["target"])),
        [r["config"] for r in records],
        [r["latency_s"] for r in records],
        np.asarray([r["features"] for r in records], dtype=np.float64),
    )


class ReplaySpace(Space):
    """The workload's space restricted to its measured configs.

    `check` rejects anything unmeasured, `sample` draws a measured config uniformly and
    `mutate` moves to a measured config differing in the fewest knobs (the nearest neighbour
    a one-knob mutation would reach if the whole space were measured).
    """

    def __init__(self, pool: Pool) -> None:
        self.inner = pool.space
        self.knobs = pool.space.knobs
        self.configs = pool.configs
        self.index = {self.key(c): n for n, c in enumerate(pool.configs)}
        positions = {k: {v: i for i, v in enumerate(vs)} for k, vs in self.knobs.items()}
        self._codes = np.array(
            [[positions[k][c[k]] for k in self.knobs] for c in pool.configs], dtype=np.int64
        )
        self._positions = positions

    def naive(self) -> Config:
        return self.inner.naive()

    def default(self) -> Config:
        return self.inner.default()

    def check(self, config: Config) -> str | None:
        return None if self.key(config) in self.index else "not measured"

    def sample(self, rng: random.Random) -> Config:
        return dict(rng.choice(self.configs))

    def mutate(self, config: Config, rng: random.Random) -> Config:
        code = np.array([self._positions[k].get(config[k], -1) for k in self.knobs])
        distance = (self._codes != code).sum(axis=1)
        distance[distance == 0] = len(self.knobs) + 1
        nearest = np.flatnonzero(distance == distance.min())
        return dict(self.configs[int(nearest[rng.randrange(len(nearest))])])


Factory = Callable[[Pool, ReplaySpace, int], SearchStrategy]


def _guided(prior: TrainingSet) -> Factory:
    def factory(pool: Pool, space: ReplaySpace, seed: int) -> SearchStrategy:
        def featurize(config: Config) -> list[float]:
            vector: list[float] = pool.features[space.index[space.key(config)]].tolist()
            return vector

        guide = Guide(featurize, XGBModel(seed=seed), prior)
        return search.create("model", space, seed=seed, guide=guide)

    return factory


def _plain(name: str) -> Factory:
    return lambda pool, space, seed: search.create(name, space, seed=seed)


def training_set(pools: Sequence[Pool]) -> TrainingSet:
    """Every record of `pools`, one group per workload (what the tuner's transfer loads)."""
    return TrainingSet(
        [row.tolist() for p in pools for row in p.features],
        [t for p in pools for t in p.latencies],
        [p.workload.name for p in pools for _ in p.latencies],
    )


def replay(pool: Pool, factory: Factory, seed: int, tolerance: float) -> list[float | None]:
    """Latencies in the order a tuning with this strategy would measure them, until it
    reaches `tolerance` of the pool's best (or measures everything)."""
    space = ReplaySpace(pool)
    strategy = factory(pool, space, seed)
    measured: list[float | None] = []
    pending = [naive] if strategy.take(naive := space.naive()) else []
    target = pool.best * (1 + tolerance)
    while len(measured) < len(pool.configs):
        batch, pending = pending + strategy.propose(BATCH - len(pending)), []
        if not batch:  # rejection sampling missed the last few configs: a replay artifact
            batch = [c for c in pool.configs if strategy.take(c)][:BATCH]
        results = [(c, pool.latencies[space.index[space.key(c)]]) for c in batch]
        strategy.notify(results)
        measured += [t for _, t in results]
        if any(t is not None and t <= target for t in measured):
            break
    return measured


def trials_to(measured: Sequence[float | None], target: float) -> int | None:
    """1-based trial at which a latency within `target` was first measured."""
    return next((n + 1 for n, t in enumerate(measured) if t is not None and t <= target), None)


@dataclass
class Row:
    workload: str
    configs: int
    within5: int
    within1: int
    trials5: dict[str, list[float]]
    trials1: dict[str, list[float]]
    curves: dict[str, np.ndarray]  # median best-so-far (pool best / best found) per trial


def replay_workload(pool: Pool, others: Sequence[Pool], seeds: int, curve_length: int) -> Row:
    strategies: dict[str, Factory] = {
        "random": _plain("random"),
        "evolutionary": _plain("evolutionary"),
        "model": _guided(TrainingSet()),
        "model+transfer": _guided(training_set(others)),
    }
    row = Row(
        pool.workload.name, len(pool.configs), pool.within(0.05), pool.within(0.01), {}, {}, {}
    )
    for name, factory in strategies.items():
        runs = [replay(pool, factory, seed, 0.01) for seed in range(seeds)]
        unreached = len(pool.configs) + 1
        row.trials5[name] = [trials_to(r, pool.best * 1.05) or unreached for r in runs]
        row.trials1[name] = [trials_to(r, pool.best * 1.01) or unreached for r in runs]
        curves = []
        for run in runs:
            best = np.minimum.accumulate([t if t is not None else np.inf for t in run])
            padded = np.full(curve_length, best[-1])  # it stopped: the best stays
            padded[: min(len(best), curve_length)] = best[:curve_length]
            curves.append(pool.best / padded)
        row.curves[name] = np.median(np.array(curves), axis=0)
        print(
            f"{pool.workload.name:16} {name:15} trials to 5%: median "
            f"{np.median(row.trials5[name]):5.1f}, to 1%: {np.median(row.trials1[name]):5.1f}",
            flush=True,
        )
    return row


# ----------------------------------------------------------------------------- ranking


NO_RECORDS = "no records: the roofline estimate"
OBJECTIVES: tuple[Objective, ...] = ("rank", "regression")


def ranking_quality(
    pool: Pool, others: Sequence[Pool], splits: int, k: int
) -> dict[tuple[str, str], tuple[float, float]]:
    """(Kendall tau, top-k recall) on held-out halves of the pool, mean over `splits` random
    halves, per (training set, objective): no records (the roofline estimate, the same for
    both objectives), own records (64, or the whole other half), the other workloads only,
    and both."""
    prior = training_set(others)
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    n = len(pool.configs)
    for split in range(splits):
        order = np.random.default_rng(split).permutation(n)
        train, test = order[: n // 2], order[n // 2 :]
        truth = normalized_throughput([pool.latencies[i] for i in test], [0] * len(test))
        estimated = roofline.estimate(pool.features[test])
        for objective in OBJECTIVES:
            results.setdefault((NO_RECORDS, objective), []).append(
                (kendall_tau(estimated, truth), top_k_recall(estimated, truth, k))
            )
        sets = {
            "64 own": (train[:64], TrainingSet()),
            f"{n // 2} own": (train, TrainingSet()),
            "other workloads only": (train[:0], prior),
            "other workloads + 64 own": (train[:64], prior),
        }
        for label, (own, extra) in sets.items():
            for objective in OBJECTIVES:
                model = XGBModel(objective, seed=split)
                model.fit(
                    [*extra.features, *pool.features[own].tolist()],
                    [*extra.latencies, *(pool.latencies[i] for i in own)],
                    [*extra.groups, *["own"] * len(own)],
                )
                scores = model.predict(pool.features[test])
                results.setdefault((label, objective), []).append(
                    (kendall_tau(scores, truth), top_k_recall(scores, truth, k))
                )
    return {
        key: (float(np.mean([v[0] for v in values])), float(np.mean([v[1] for v in values])))
        for key, values in results.items()
    }


# ----------------------------------------------------------------------------- report


COLORS = {
    "random": "#888888",
    "evolutionary": "#1f77b4",
    "model": "#d62728",
    "model+transfer": "#2ca02c",
}


PLOT_LOW = 0.5  # the y axis starts here; slower best-so-far values sit on the axis
PLOT_TICKS = (1, 2, 5, 10, 20, 50, 100, 200, 500)


def svg_plot(rows: Sequence[Row], length: int) -> str:
    """Median best-so-far (best measured / best found) against trials on a log axis, one
    panel per workload, drawn by hand (no plotting library needed)."""
    w, h, pad, top = 300, 200, 40, 20
    pw, ph = w - pad - 10, h - 40
    span = math.log(length)

    def x(i: int, trial: float) -> float:
        return i * w + pad + pw * math.log(trial) / span

    def y(value: float) -> float:
        clipped = min(1.0, max(PLOT_LOW, value))
        return top + ph * (1 - (clipped - PLOT_LOW) / (1 - PLOT_LOW))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w * len(rows)}" height="{h + 30}" '
        'font-family="sans-serif" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for i, row in enumerate(rows):
        x0 = i * w + pad
        parts.append(f'<text x="{x0 + pw / 2}" y="14" text-anchor="middle">{row.workload}</text>')
        parts.append(
            f'<rect x="{x0}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#000"/>'
        )
        for v in (PLOT_LOW, 0.75, 0.95, 1.0):
            parts.append(f'<text x="{x0 - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
        parts.append(
            f'<line x1="{x0}" y1="{y(0.95):.1f}" x2="{x0 + pw}" y2="{y(0.95):.1f}" '
            'stroke="#bbb" stroke-dasharray="3,3"/>'
        )
        for t in (t for t in PLOT_TICKS if t <= length):
            parts.append(
                f'<text x="{x(i, t):.1f}" y="{top + ph + 14}" text-anchor="middle">{t}</text>'
            )
        for name, curve in row.curves.items():
            points = " ".join(
                f"{x(i, t + 1):.1f},{y(float(v)):.1f}" for t, v in enumerate(curve[:length])
            )
            parts.append(
                f'<polyline points="{points}" fill="none" stroke="{COLORS[name]}" '
                'stroke-width="1.5"/>'
            )
    legend = h + 20
    for j, (name, color) in enumerate(COLORS.items()):
        parts.append(
            f'<rect x="{pad + j * 130}" y="{legend - 6}" width="14" height="3" fill="{color}"/>'
            f'<text x="{pad + j * 130 + 18}" y="{legend}">{name}</text>'
        )
    parts.append(
        f'<text x="{w * len(rows) - 10}" y="{legend}" text-anchor="end">x: trials (log); '
        "y: best measured / best found so far, median of seeds</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts)


def trials_table(rows: Sequence[Row]) -> str:
    names = list(COLORS)
    lines = [
        "| workload | configs (within 5% / 1%) | "
        + " | ".join(f"{n}: 5% / 1%" for n in names)
        + " | model vs random (5%) | transfer vs model (5%) |",
        "|---|---|" + "---|" * (len(names) + 2),
    ]
    for r in rows:
        med5 = {n: float(np.median(r.trials5[n])) for n in names}
        med1 = {n: float(np.median(r.trials1[n])) for n in names}
        cells = " | ".join(f"{med5[n]:g} / {med1[n]:g}" for n in names)
        lines.append(
            f"| {r.workload} | {r.configs} ({r.within5} / {r.within1}) | {cells} "
            f"| {med5['model'] / med5['random']:.2f} "
            f"| {med5['model+transfer'] / med5['model']:.2f} |"
        )
    return "\n".join(lines)


def ranking_table(quality: dict[str, dict[tuple[str, str], tuple[float, float]]], k: int) -> str:
    lines = [
        f"| workload | trained on | rank:pairwise tau / recall@{k} | regression tau / recall@{k} |",
        "|---|---|---|---|",
    ]
    for workload, results in quality.items():
        for label in dict.fromkeys(key[0] for key in results):
            rank, reg = results[(label, "rank")], results[(label, "regression")]
            lines.append(
                f"| {workload} | {label} | {rank[0]:.2f} / {rank[1]:.2f} "
                f"| {reg[0]:.2f} / {reg[1]:.2f} |"
            )
    return "\n".join(lines)


def report(seeds: int, splits: int, k: int, out: Path) -> None:
    pools = [load_pool(w) for w in WORKLOADS if data_path(w).exists()]
    length = max(len(p.configs) for p in pools)
    rows, quality = [], {}
    for pool in pools:
        others = [p for p in pools if p is not pool]
        quality[pool.workload.name] = ranking_quality(pool, others, splits, k)
        rows.append(replay_workload(pool, others, seeds, length))
    today = datetime.date.today().isoformat()
    out.mkdir(parents=True, exist_ok=True)
    plot = out / f"search_replay-{today}.svg"
    plot.write_text(svg_plot(rows, length))
    measured = sorted({json.loads(data_path(p.workload).read_text())["date"] for p in pools})
    text = "\n".join(
        [
            f"# Search strategies replayed on measured CPU spaces ({today})",
            "",
            f"- machine: {describe_machine()}",
            f"- commit: {git_commit()}",
            f"- command: `python bench/search_replay.py {' '.join(sys.argv[1:])}`",
            f"- spaces measured {', '.join(measured)} by `bench/search_replay.py measure` and "
            "`remeasure` (uniform samples, naive first, 1 thread, median of 7 repeats, the "
            "faster of two sessions; a shared, noisy 2-core machine); data in `bench/data/`",
            *(
                f"- {p.workload.name}: {noise(json.loads(data_path(p.workload).read_text()))}"
                for p in pools
            ),
            f"- replay: batches of {BATCH} after the naive config, as the tuner runs; "
            f"{seeds} seeds per strategy; medians over seeds; a run that never gets there "
            "counts as configs + 1",
            "",
            "## Trials to come within 5% / 1% of the best measured config (median)",
            "",
            trials_table(rows),
            "",
            f"![convergence]({plot.name})",
            "",
            f"## Ranking quality on held-out records (mean of {splits} random halves)",
            "",
            "Each model is trained on the records named and scored on the other half of the "
            "workload's records (which it never saw): Kendall tau-b against the measured "
            f"throughput, and the share of the {k} fastest held-out configs among the model's "
            f"{k} best scored.",
            "",
            ranking_table(quality, k),
            "",
        ]
    )
    path = out / f"search_replay-{today}.md"
    path.write_text(text)
    print(text)
    print(f"wrote {path} and {plot}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    m = commands.add_parser("measure", help="measure configs of each workload into bench/data")
    m.add_argument("--workloads", nargs="+", default=[w.name for w in WORKLOADS])
    m.add_argument("--configs", type=int, default=400)
    m.add_argument("--seed", type=int, default=0)
    a = commands.add_parser("remeasure", help="measure every config again, keep the fastest")
    a.add_argument("--workloads", nargs="+", default=[w.name for w in WORKLOADS])
    a.add_argument("--sessions", type=int, default=2)
    r = commands.add_parser("replay", help="replay strategies on the measured spaces")
    r.add_argument("--seeds", type=int, default=20)
    r.add_argument("--splits", type=int, default=5, help="held-out halves for ranking quality")
    r.add_argument("--top-k", type=int, default=10)
    r.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    args = parser.parse_args()
    if args.command == "measure":
        DATA.mkdir(parents=True, exist_ok=True)
        for workload in WORKLOADS:
            if workload.name in args.workloads:
                measure(workload, args.configs, args.seed)
    elif args.command == "remeasure":
        for workload in WORKLOADS:
            if workload.name in args.workloads:
                remeasure(workload, args.sessions)
    else:
        report(args.seeds, args.splits, args.top_k, args.out)


if __name__ == "__main__":
    main()
