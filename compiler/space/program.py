"""The schedule space of a whole program: the product of its stages' spaces.

Knobs are prefixed by stage (`s0.parallel`, `s1.vec`); each row group that analysis found
(stages sharing leading row axes, e.g. softmax's max, sum and normalize) adds `g<n>.fuse`:
when true the group's stages are computed row by row inside one parallel loop over the rows
(each row's data stays in cache between the stages), and the grouped stages' knobs that this
leaves unused (on the CPU their own `parallel`/`split`, and the tiles of the row axes) keep
their first values (`Schedule.in_rows`). On CUDA targets a fused group is one kernel with one
block per row, and the grouped stages' `group` and `items` knobs (outputs, splits or elements
per block) keep their first values, so its block is one-dimensional and no larger than its
largest stage's. A target may give a fused group knobs of its own
(`CompilerBackend.group_knobs`, as `g<n>.<name>`: CUDA's `g<n>.cache` holds the rows read
more than once in shared memory).

Each attention chain a template of the target computes in one pass (`CompilerBackend.chains`,
`compiler.attention`) adds `a<n>.fuse` and that template's knobs (`a<n>.kb`, ...): when true
the chain's stages are that one kernel, and their own knobs (and those of the row groups
inside it) keep their naive values; when false the chain's knobs keep their naive values.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from tunehub.compiler.analysis import Analysis, Stage, analyze
from tunehub.compiler.backend import compiler_backend
from tunehub.compiler.ir import Program
from tunehub.compiler.schedule.union import Union
from tunehub.compiler.space.space import Config, Knob, Space
from tunehub.schemas.target import Target

_MAX_DRAWS = 1000
FUSE_DOC = "compute the row group's stages row by row in one loop (GPU: one block per row)"
CHAIN_DOC = "compute the attention chain's stages in one pass over key blocks (online softmax)"


def stage_prefix(stage: Stage) -> str:
    return f"s{stage.index}."


def group_knob(group: int) -> str:
    return f"g{group}.fuse"


def chain_knob(chain: int) -> str:
    return f"a{chain}.fuse"


def chain_prefix(chain: int) -> str:
    return f"a{chain}."


def _own(group: int, name: str) -> str:
    """The space name of a row group's own knob `name` (`CompilerBackend.group_knobs`)."""
    return f"g{group}.{name}"


class ProgramSpace(Space):
    """Every stage's knobs under its prefix, plus one fusion knob per row group."""

    def __init__(self, program: Program, target: Target) -> None:
        self.program = program
        self.target = target
        backend = compiler_backend(target)
        self.analysis: Analysis = analyze(program, backend.one_pass, backend.keep_terms)
        # One schedule per stage, kept: a union resolves its stage once (`schedule.union`).
        self.schedules = {s.index: backend.schedule(s) for s in self.analysis.stages}
        self.knobs: dict[str, tuple[Knob, ...]] = {}
        for stage in self.analysis.stages:
            knobs = self.schedules[stage.index].knobs(stage, target)
            self.knobs.update({stage_prefix(stage) + k: v for k, v in knobs.items()})
        self.backend = backend
        for n in range(len(self.analysis.groups)):
            self.knobs[group_knob(n)] = (False, True)
            self.knobs.update({_own(n, k): v for k, v in self.backend.group_knobs.items()})
        self.chains = backend.chains(self.analysis, target)
        self.chain_schedules = tuple(backend.schedule(c) for c in self.chains)
        for n, chain in enumerate(self.chains):
            self.knobs[chain_knob(n)] = (False, True)
            knobs = self.chain_schedules[n].knobs(chain, target)
            self.knobs.update({chain_prefix(n) + k: v for k, v in knobs.items()})

    def chain_config(self, chain: int, config: Config) -> Config:
        """Attention chain `chain`'s own knobs of `config` (besides `fuse`), unprefixed."""
        prefix, fuse = chain_prefix(chain), chain_knob(chain)
        return {
            k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix) and k != fuse
        }

    def _chain(self, n: int, fuse: bool, own: Config | None = None) -> Config:
        """Chain `n`'s knobs: `fuse` and its template's `own` (unfused: the naive ones)."""
        if own is None or not fuse:
            own = self.chain_schedules[n].naive(self.chains[n], self.target)
        return {chain_knob(n): fuse, **{chain_prefix(n) + k: v for k, v in own.items()}}

    def _in_chain(self, n: int, config: Config) -> Config:
        """What chain `n` fused fixes: its stages' knobs at their naive values, the row groups
        inside it unfused."""
        members = {s.index for s in self.chains[n].members}
        fixed: Config = {}
        for index in sorted(members):
            stage = self.analysis.stages[index]
            naive = self.schedules[index].naive(stage, self.target)
            fixed.update({stage_prefix(stage) + k: v for k, v in naive.items()})
        for g, group in enumerate(self.analysis.groups):
            if set(group.stages) <= members:
                fixed.update(self._group(g, False, self._unfused()))
        return fixed

    def group_config(self, group: int, config: Config) -> Config:
        """Row group `group`'s own knobs of `config` (besides `fuse`), without their prefix."""
        return {k: config[_own(group, k)] for k in self.backend.group_knobs}

    def _group(self, n: int, fuse: bool, own: Config) -> Config:
        return {group_knob(n): fuse, **{_own(n, k): v for k, v in own.items()}}

    def stage_config(self, stage: Stage, config: Config) -> Config:
        """The stage's own knobs of `config`, without their prefix."""
        prefix = stage_prefix(stage)
        return {k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix)}

    def _merged(self, fuse: bool, pick: str, chains: bool = False) -> Config:
        config: Config = {}
        for stage in self.analysis.stages:
            part = getattr(self.schedules[stage.index], pick)(stage, self.target)
            config.update({stage_prefix(stage) + k: v for k, v in part.items()})
        for n, group in enumerate(self.analysis.groups):
            own = self.backend.group_default(self.analysis, group, self.target) if fuse else {}
            config.update(self._group(n, fuse, {**self._unfused(), **own}))
        for n, chain in enumerate(self.chains):
            own = getattr(self.chain_schedules[n], pick)(chain, self.target)
            config.update(self._chain(n, chains, own))
        return config

    def _unfused(self) -> Config:
        """A group's own knobs while it is not fused: their first values."""
        return {name: values[0] for name, values in self.backend.group_knobs.items()}

    def naive(self) -> Config:
        return self._merged(False, "naive")

    def default(self) -> Config:
        """Every stage's and group's default, and every attention chain fused."""
        return self.canonical(self._merged(True, "default", chains=True))

    def seeds(self, symbols: Mapping[str, int] | None = None) -> list[Config]:
        """Each attention template's seeds (chains fused), then seed `n` setting every stage
        to its schedule's seed `n` (the default where a stage has fewer; chains unfused): the
        valid and distinct ones."""
        found: dict[str, Config] = {}
        fused = self.default()
        for n, chain in enumerate(self.chains):
            for own in self.chain_schedules[n].seeds(chain, self.target, symbols or {}):
                config = {**fused, **self._chain(n, True, own)}
                if self.check(config) is None:
                    found.setdefault(self.key(config), config)
        per_stage = {
            stage.index: self.schedules[stage.index].seeds(stage, self.target, symbols or {})
            for stage in self.analysis.stages
        }
        default = self.canonical(self._merged(True, "default"))
        for n in range(max(map(len, per_stage.values()), default=0)):
            config = dict(default)
            for stage in self.analysis.stages:
                if n < len(per_stage[stage.index]):
                    own = per_stage[stage.index][n]
                    config.update({stage_prefix(stage) + k: v for k, v in own.items()})
            if self.check(config) is None:
                found.setdefault(self.key(config), config)
        return list(found.values())

    def sample(self, rng: random.Random) -> Config:
        """A uniformly drawn valid config, drawn stage by stage: constraints never span
        stages, so this is uniform over the valid product without rejecting whole configs
        (whose acceptance would shrink with every stage)."""
        config: Config = {}
        for stage in self.analysis.stages:
            config.update(self._sample_stage(stage, rng))
        for n, group in enumerate(self.analysis.groups):
            fuse = rng.choice((False, True))
            own = {k: rng.choice(v) for k, v in self.backend.group_knobs.items()}
            valid = fuse and not self.backend.group_error(self.analysis, group, self.target, own)
            config.update(self._group(n, fuse, own if valid else self._unfused()))
        for n, chain in enumerate(self.chains):
            own = self._sample_stage(chain, rng, chain_prefix(n), self.chain_schedules[n])
            config.update(self._chain(n, rng.choice((False, True)), self.chain_config(n, own)))
        return self.canonical(config)

    def _sample_stage(
        self,
        stage: Stage,
        rng: random.Random,
        prefix: str | None = None,
        schedule: Union | None = None,
    ) -> Config:
        """A valid config of one stage (or attention chain), drawn uniformly."""
        prefix = prefix or stage_prefix(stage)
        names = [k for k in self.knobs if k.startswith(prefix) and not k.endswith(".fuse")]
        schedule = schedule or self.schedules[stage.index]
        for _ in range(_MAX_DRAWS):
            drawn = {k[len(prefix) :]: rng.choice(self.knobs[k]) for k in names}
            own = schedule.canonical(stage, self.target, drawn)
            if schedule.check(stage, self.target, own) is None:
                return {prefix + k: v for k, v in own.items()}
        default = schedule.default(stage, self.target)
        return {prefix + k: v for k, v in default.items()}

    def canonical(self, config: Config) -> Config:
        """Each stage's knobs in its schedule's canonical form (`Schedule.canonical`, and
        `Schedule.in_rows` in a fused group), and the own knobs of groups not fused at their
        first values."""
        result = dict(config)
        for n, chain in enumerate(self.chains):
            fuse = bool(config.get(chain_knob(n), False))
            own = self.chain_schedules[n].canonical(
                chain, self.target, self.chain_config(n, config)
            )
            result.update(self._chain(n, fuse, own))
            if fuse:
                result.update(self._in_chain(n, config))
        for n in range(len(self.analysis.groups)):
            if not result.get(group_knob(n), True):
                result.update(self._group(n, False, self._unfused()))
        for stage in self.analysis.stages:
            own = self._canonical_stage(stage, result, self.stage_config(stage, result))
            result.update({stage_prefix(stage) + k: v for k, v in own.items()})
        return result

    def _canonical_stage(self, stage: Stage, config: Config, own: Config) -> Config:
        schedule = self.schedules[stage.index]
        own = schedule.canonical(stage, self.target, own)
        rows = self._fused_rows(stage, config)
        return own if rows is None else schedule.in_rows(stage, self.target, own, rows)

    def _fused_rows(self, stage: Stage, config: Config) -> int | None:
        """The row axes of the fused group `stage` is computed in, if any."""
        for n, group in enumerate(self.analysis.groups):
            if stage.index in group.stages and config.get(group_knob(n), False):
                return group.rows
        return None

    def check(self, config: Config) -> str | None:
        reason = super().check(config)
        if reason is not None:
            return reason
        for stage in self.analysis.stages:
            own = self.stage_config(stage, config)
            reason = self.schedules[stage.index].check(stage, self.target, own)
            if reason is None and self._canonical_stage(stage, config, own) != own:
                reason = "knobs that leave its kernel unchanged keep their first values"
            if reason is not None:
                return f"stage {stage.index} ({stage.anchor.name}): {reason}"
        for n, group in enumerate(self.analysis.groups):
            own = self.group_config(n, config)
            if not config[group_knob(n)]:
                if own != self._unfused():
                    return f"group {n} is not fused: its other knobs keep their first values"
                continue
            reason = self.backend.group_error(self.analysis, group, self.target, own)
            if reason is not None:
                return f"group {n}: {reason}"
        for n, chain in enumerate(self.chains):
            reason = self._chain_error(n, chain, config)
            if reason is not None:
                return f"attention chain {n}: {reason}"
        return None

    def _chain_error(self, n: int, chain: Stage, config: Config) -> str | None:
        own, schedule = self.chain_config(n, config), self.chain_schedules[n]
        if not config[chain_knob(n)]:
            if own != schedule.naive(chain, self.target):
                return "not fused: its other knobs keep their naive values"
            return None
        if any(config[k] != v for k, v in self._in_chain(n, config).items()):
            return "fused: its stages' knobs keep their naive values, its row groups unfused"
        reason = schedule.check(chain, self.target, own)
        if reason is None and schedule.canonical(chain, self.target, own) != own:
            reason = "knobs that leave its kernel unchanged keep their first values"
        return reason
