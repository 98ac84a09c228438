"""The schedule of a stage: the union of the templates its target kind lists for its class.

A target kind lists, per stage class, one template (a `Schedule`) per kernel
(`CompilerBackend.schedules`); as TVM MetaSchedule's `SpaceGeneratorUnion` joins the spaces of
several generators, `Union` joins the templates that apply to a stage (`Schedule.why_not` is
None), in list order, into one space, itself a `Schedule`, so the space, lowering and explain
see a single schedule per stage:

* one template applies: the union is that template, knob for knob (no `mode` knob);
* none applies: the union is its `otherwise` (`CompilerBackend.schedule`: the templates of the
  class the stage also belongs to, such as a contraction's reduction, or the fallback);
* several apply: a `mode` knob, whose values are the kinds (`Schedule.kind`) of those offered
  (`Schedule.offered`), in list order, then every template's knobs in list order, those of a
  template not offered at their first values only. A config's `mode` picks the template that
  checks and lowers it, given its own knobs; the other templates' knobs keep their first
  values (`check` refuses others; `canonical` resets them, unless the chosen template says it
  does not, `Schedule.resets_others`). The naive config is the first offered template's
  naive, the others at their first values. The default is that of the first template, by
  `Schedule.priority` (highest first, list order among equals), that has one (`default` not
  None); the naive where none has. Seeds are every offered template's, by the same order, or,
  where some templates' seeds are exclusive at the tuning's symbols (`Schedule.exclusive`),
  only theirs. In a fused row, the chosen template's `in_rows` (the union's naive config where
  it has none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Expr
from tunehub.compiler.loop import Stmt
from tunehub.compiler.schedule.stage import Context, Schedule, first_values
from tunehub.schemas.target import Target

if TYPE_CHECKING:  # the space package loads the backends, which load the schedules
    from tunehub.compiler.space.space import Config, Knob

MODE = "mode"


class Union(Schedule):
    """The templates of one stage class that apply to a stage, joined (see the module doc)."""

    kind = "union"

    def __init__(self, templates: Sequence[Schedule], otherwise: Schedule) -> None:
        self.templates = tuple(templates)
        self.otherwise = otherwise

    def members(self, stage: Stage, target: Target) -> tuple[Schedule, ...]:
        """The templates that apply to `stage` on `target`, in list order."""
        return tuple(t for t in self.templates if t.why_not(stage, target) is None)

    def _one(self, members: tuple[Schedule, ...]) -> Schedule | None:
        """The schedule the union is where it is a single one (no `mode`), else None."""
        if len(members) > 1:
            return None
        return members[0] if members else self.otherwise

    @staticmethod
    def _offered(members: tuple[Schedule, ...], stage: Stage, target: Target) -> list[Schedule]:
        return [t for t in members if t.offered(stage, target)]

    @staticmethod
    def _chosen(members: tuple[Schedule, ...], stage: Stage, config: Config) -> Schedule:
        mode = config[MODE]
        for template in members:
            if template.kind == mode:
                return template
        raise KeyError(f"no {mode!r} template applies to stage {stage.index}")

    @staticmethod
    def _own(template: Schedule, stage: Stage, target: Target, config: Config) -> Config:
        """`template`'s own knobs of `config`."""
        return {k: config[k] for k in template.knobs(stage, target) if k in config}

    @staticmethod
    def _others(
        members: tuple[Schedule, ...], chosen: Schedule, stage: Stage, target: Target
    ) -> Config:
        """The first values of the knobs of every template but `chosen`."""
        found: Config = {}
        for template in members:
            if template is not chosen:
                found.update(first_values(template.knobs(stage, target)))
        return found

    # ------------------------------------------------------------------ the interface

    def why(self, stage: Stage, target: Target) -> str:
        """The single schedule's reason; where several apply, each offered template's (and
        why the others do not)."""
        members = self.members(stage, target)
        one, unfit = self._one(members), self._unfit(stage, target)
        if one is None:
            offered = self._offered(members, stage, target)
            picks = "; ".join(f"{t.kind}: {t.why(stage, target)}" for t in offered)
            return f"`mode` picks one of {picks}" + (f"; {unfit}" if unfit else "")
        if one is self.otherwise and unfit:
            return f"{one.why(stage, target)} ({unfit})"
        return one.why(stage, target)

    def _unfit(self, stage: Stage, target: Target) -> str:
        """Why the templates that do not apply do not, those with one reason together."""
        reasons: dict[str, list[str]] = {}
        for template in self.templates:
            reason = template.why_not(stage, target)
            if reason is not None:
                reasons.setdefault(reason, []).append(template.kind)
        return "; ".join(f"no {_listed(kinds)}: {r}" for r, kinds in reasons.items())

    def title(self, stage: Stage, target: Target) -> str:
        members = self.members(stage, target)
        one = self._one(members)
        if one is not None:
            return one.title(stage, target)
        return " | ".join(t.title(stage, target) for t in self._offered(members, stage, target))

    def knob_doc(self, stage: Stage, target: Target, knob: str) -> str:
        members = self.members(stage, target)
        one = self._one(members)
        if one is not None:
            return one.knob_doc(stage, target, knob)
        if knob == MODE:
            kinds = [f"{t.kind} ({t.mode_doc})" if t.mode_doc else t.kind for t in self.templates]
            return f"the kernel: {_listed(kinds)}"
        return next((t.knob_docs[knob] for t in members if knob in t.knob_docs), "")

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        members = self.members(stage, target)
        one = self._one(members)
        if one is not None:
            return one.knobs(stage, target)
        offered = self._offered(members, stage, target)
        knobs: dict[str, tuple[Knob, ...]] = {MODE: tuple(t.kind for t in offered)}
        for template in members:
            own = template.knobs(stage, target)
            knobs.update(own if template in offered else {k: v[:1] for k, v in own.items()})
        return knobs

    def naive(self, stage: Stage, target: Target) -> Config:
        members = self.members(stage, target)
        one = self._one(members)
        if one is not None:
            return one.naive(stage, target)
        return self._naive(members, stage, target)

    def _naive(self, members: tuple[Schedule, ...], stage: Stage, target: Target) -> Config:
        first = self._offered(members, stage, target)[0]
        config: Config = {MODE: first.kind}
        for template in members:
            if template is first:
                config.update(first.naive(stage, target))
            else:
                config.update(first_values(template.knobs(stage, target)))
        return config

    def default(self, stage: Stage, target: Target) -> Config:
        members = self.members(stage, target)
        one = self._one(members)
        if one is not None:
            own = one.default(stage, target)
            return one.naive(stage, target) if own is None else own
        naive = self._naive(members, stage, target)
        for template in _by_priority(self._offered(members, stage, target)):
            own = template.default(stage, target)
            if own is not None:
                return {**naive, MODE: template.kind, **own}
        return naive

    def seeds(self, stage: Stage, target: Target, symbols: Mapping[str, int]) -> list[Config]:
        members = self.members(stage, target)
        one = self._one(members)
        if one is not None:
            return one.seeds(stage, target, symbols)
        ordered = _by_priority(self._offered(members, stage, target))
        only = [t for t in ordered if t.exclusive(stage, target, symbols)]
        naive = self._naive(members, stage, target)
        return [
            {**naive, MODE: template.kind, **own}
            for template in only or ordered
            for own in template.seeds(stage, target, symbols)
        ]

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        members = self.members(stage, target)
        one = self._one(members)
        if one is not None:
            return one.check(stage, target, config)
        chosen = self._chosen(members, stage, config)
        others = self._others(members, chosen, stage, target)
        if any(config.get(name, value) != value for name, value in others.items()):
            return f"knobs of other modes than {chosen.kind} keep their first values"
        return chosen.check(stage, target, self._own(chosen, stage, target, config))

    def canonical(self, stage: Stage, target: Target, config: Config) -> Config:
        members = self.members(stage, target)
        one = self._one(members)
        if one is not None:
            return one.canonical(stage, target, config)
        chosen = self._chosen(members, stage, config)
        own = chosen.canonical(stage, target, self._own(chosen, stage, target, config))
        if not chosen.resets_others:
            return {**config, **own}
        others = self._others(members, chosen, stage, target)
        return {**config, **{k: v for k, v in others.items() if k in config}, **own}

    def in_rows(self, stage: Stage, target: Target, config: Config, rows: int) -> Config:
        members = self.members(stage, target)
        one = self._one(members)
        if one is not None:
            own = one.in_rows(stage, target, config, rows)
            return one.naive(stage, target) if own is None else own
        chosen = self._chosen(members, stage, config)
        own = chosen.in_rows(stage, target, self._own(chosen, stage, target, config), rows)
        if own is None:
            return self._naive(members, stage, target)
        return {**config, **self._others(members, chosen, stage, target), **own}

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        members = self.members(stage, ctx.target)
        one = self._one(members)
        if one is not None:
            return one.lower(stage, config, ctx, rows)
        chosen = self._chosen(members, stage, config)
        return chosen.lower(stage, self._own(chosen, stage, ctx.target, config), ctx, rows)


def _by_priority(templates: Sequence[Schedule]) -> list[Schedule]:
    """Highest `priority` first, in list order among equals."""
    return sorted(templates, key=lambda t: -t.priority)


def _listed(words: Sequence[str]) -> str:
    """`a, b or c`."""
    if len(words) < 2:
        return "".join(words)
    return f"{', '.join(words[:-1])} or {words[-1]}"
