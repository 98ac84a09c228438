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

What applies, what is offered and each template's knobs depend only on the stage and target;
a union keeps them for the last stage it was asked about (`_View`: a space keeps one union per
stage, and samples, mutates and checks thousands of configs of it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tunehub.compiler.analysis import Stage
from tunehub.compiler.ir import Expr
from tunehub.compiler.loop import Stmt
from tunehub.compiler.schedule.stage import Context, Schedule, first_values
from tunehub.schemas.target import Target

if TYPE_CHECKING:  # the space package loads the backends, which load the schedules
    from tunehub.compiler.space.space import Config, Knob

MODE = "mode"


@dataclass(frozen=True, eq=False)
class _View:
    """A union resolved for one stage on one target: the templates that apply (`members`),
    those `mode` offers, and each member's knobs (where several apply)."""

    stage: Stage
    target: Target
    members: tuple[Schedule, ...]
    offered: tuple[Schedule, ...]
    knobs: tuple[dict[str, tuple[Knob, ...]], ...]

    def own(self, template: Schedule, config: Config) -> Config:
        """`template`'s own knobs of `config`."""
        knobs = self.knobs[self.members.index(template)]
        return {k: config[k] for k in knobs if k in config}

    def others(self, chosen: Schedule) -> Config:
        """The first values of the knobs of every member but `chosen`."""
        found: Config = {}
        for template, knobs in zip(self.members, self.knobs, strict=True):
            if template is not chosen:
                found.update(first_values(knobs))
        return found

    def chosen(self, config: Config) -> Schedule:
        """The member `config`'s `mode` names."""
        mode = config[MODE]
        for template in self.members:
            if template.kind == mode:
                return template
        raise KeyError(f"no {mode!r} template applies to stage {self.stage.index}")

    def by_priority(self) -> list[Schedule]:
        """The offered templates, highest `priority` first, in list order among equals."""
        return sorted(self.offered, key=lambda t: -t.priority)

    def naive(self) -> Config:
        first = self.offered[0]
        config: Config = {MODE: first.kind}
        for template, knobs in zip(self.members, self.knobs, strict=True):
            if template is first:
                config.update(first.naive(self.stage, self.target))
            else:
                config.update(first_values(knobs))
        return config


class Union(Schedule):
    """The templates of one stage class that apply to a stage, joined (see the module doc)."""

    kind = "union"

    def __init__(self, templates: Sequence[Schedule], otherwise: Schedule) -> None:
        self.templates = tuple(templates)
        self.otherwise = otherwise
        self._last: _View | None = None

    def _view(self, stage: Stage, target: Target) -> _View:
        view = self._last
        if view is None or view.stage is not stage or view.target != target:
            members = tuple(t for t in self.templates if t.why_not(stage, target) is None)
            several = len(members) > 1
            offered = tuple(t for t in members if t.offered(stage, target)) if several else ()
            knobs = tuple(t.knobs(stage, target) for t in members) if several else ()
            view = self._last = _View(stage, target, members, offered, knobs)
        return view

    def _one(self, stage: Stage, target: Target) -> tuple[Schedule | None, _View]:
        """The schedule the union is where it is a single one (no `mode`), else None; and
        the union's view of the stage."""
        view = self._view(stage, target)
        if len(view.members) > 1:
            return None, view
        return (view.members[0] if view.members else self.otherwise), view

    # ------------------------------------------------------------------ the interface

    def why(self, stage: Stage, target: Target) -> str:
        """The single schedule's reason; where several apply, each offered template's (and
        why the others do not)."""
        (one, view), unfit = self._one(stage, target), self._unfit(stage, target)
        if one is None:
            picks = "; ".join(f"{t.kind}: {t.why(stage, target)}" for t in view.offered)
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
        one, view = self._one(stage, target)
        if one is not None:
            return one.title(stage, target)
        return " | ".join(t.title(stage, target) for t in view.offered)

    def knob_doc(self, stage: Stage, target: Target, knob: str) -> str:
        one, view = self._one(stage, target)
        if one is not None:
            return one.knob_doc(stage, target, knob)
        if knob == MODE:
            kinds = [f"{t.kind} ({t.mode_doc})" if t.mode_doc else t.kind for t in self.templates]
            return f"the kernel: {_listed(kinds)}"
        return next((t.knob_docs[knob] for t in view.members if knob in t.knob_docs), "")

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        one, view = self._one(stage, target)
        if one is not None:
            return one.knobs(stage, target)
        knobs: dict[str, tuple[Knob, ...]] = {MODE: tuple(t.kind for t in view.offered)}
        for template, own in zip(view.members, view.knobs, strict=True):
            knobs.update(own if template in view.offered else {k: v[:1] for k, v in own.items()})
        return knobs

    def naive(self, stage: Stage, target: Target) -> Config:
        one, view = self._one(stage, target)
        return view.naive() if one is None else one.naive(stage, target)

    def default(self, stage: Stage, target: Target) -> Config:
        one, view = self._one(stage, target)
        if one is not None:
            own = one.default(stage, target)
            return one.naive(stage, target) if own is None else own
        naive = view.naive()
        for template in view.by_priority():
            own = template.default(stage, target)
            if own is not None:
                return {**naive, MODE: template.kind, **own}
        return naive

    def seeds(self, stage: Stage, target: Target, symbols: Mapping[str, int]) -> list[Config]:
        one, view = self._one(stage, target)
        if one is not None:
            return one.seeds(stage, target, symbols)
        ordered = view.by_priority()
        only = [t for t in ordered if t.exclusive(stage, target, symbols)]
        naive = view.naive()
        return [
            {**naive, MODE: template.kind, **own}
            for template in only or ordered
            for own in template.seeds(stage, target, symbols)
        ]

    def check(self, stage: Stage, target: Target, config: Config) -> str | None:
        one, view = self._one(stage, target)
        if one is not None:
            return one.check(stage, target, config)
        chosen = view.chosen(config)
        if any(config.get(name, value) != value for name, value in view.others(chosen).items()):
            return f"knobs of other modes than {chosen.kind} keep their first values"
        return chosen.check(stage, target, view.own(chosen, config))

    def canonical(self, stage: Stage, target: Target, config: Config) -> Config:
        one, view = self._one(stage, target)
        if one is not None:
            return one.canonical(stage, target, config)
        chosen = view.chosen(config)
        own = chosen.canonical(stage, target, view.own(chosen, config))
        if not chosen.resets_others:
            return {**config, **own}
        resets = {k: v for k, v in view.others(chosen).items() if k in config}
        return {**config, **resets, **own}

    def in_rows(self, stage: Stage, target: Target, config: Config, rows: int) -> Config:
        one, view = self._one(stage, target)
        if one is not None:
            own = one.in_rows(stage, target, config, rows)
            return one.naive(stage, target) if own is None else own
        chosen = view.chosen(config)
        own = chosen.in_rows(stage, target, view.own(chosen, config), rows)
        if own is None:
            return view.naive()
        return {**config, **view.others(chosen), **own}

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        one, view = self._one(stage, ctx.target)
        if one is not None:
            return one.lower(stage, config, ctx, rows)
        chosen = view.chosen(config)
        return chosen.lower(stage, view.own(chosen, config), ctx, rows)


def _listed(words: Sequence[str]) -> str:
    """`a, b or c`."""
    if len(words) < 2:
        return "".join(words)
    return f"{', '.join(words[:-1])} or {words[-1]}"
