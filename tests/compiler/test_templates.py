"""A new kernel for a stage class is one template (a `Schedule` subclass, its own module in a
target's `schedule/`) and one entry in that target's list (`CompilerBackend.schedules`):
here a toy second injective template for the CPU, listed in the test only. The union of a
class's templates (`compiler.schedule.union`) then gives the stage a `mode` knob naming both,
keeps the first template's naive config and default, adds the new one's seed, and checks,
resets and lowers a config by the template its `mode` picks; a search reaches it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import pytest

from tests.compiler.cbuild import check_configs
from tunehub.compiler.analysis import INJECTIVE, Stage
from tunehub.compiler.explain import explain
from tunehub.compiler.ir import Expr, Program
from tunehub.compiler.loop import Stmt, as_expr, var
from tunehub.compiler.lower import lower
from tunehub.compiler.program import load
from tunehub.compiler.schedule.stage import Context, Loop, Schedule, nest, reduce_body
from tunehub.compiler.search import create
from tunehub.compiler.space import space_for
from tunehub.compiler.space.space import Config, Knob
from tunehub.schemas.target import Target
from tunehub.targets.cpu.compiler import BACKEND

CPU = Target(kind="cpu", isa="x86_64-avx2")


class ColumnsFirst(Schedule):
    """The toy template: the plain nest with its loops in reverse order (the last axis
    outermost), its innermost loop unrolled by `cf_unroll`."""

    kind = "columns_first"
    summary = "the plain nest, its last axis outermost"
    knob_docs: ClassVar[Mapping[str, str]] = {"cf_unroll": "unroll factor of the inner loop"}

    def knobs(self, stage: Stage, target: Target) -> dict[str, tuple[Knob, ...]]:
        return {"cf_unroll": (1, 2, 4)}

    def naive(self, stage: Stage, target: Target) -> Config:
        return {"cf_unroll": 1}

    def default(self, stage: Stage, target: Target) -> Config | None:
        return None  # never the kernel without search: the first template's default stays

    def seeds(self, stage: Stage, target: Target, symbols: Mapping[str, int]) -> list[Config]:
        return [{"cf_unroll": 4}]

    def lower(self, stage: Stage, config: Config, ctx: Context, rows: tuple[Expr, ...]) -> Stmt:
        index = dict(zip(stage.axes, rows, strict=False))
        loops = []
        for axis, size in reversed(list(zip(stage.axes, stage.shape, strict=True))[len(rows) :]):
            loops.append(Loop(ctx.fresh(axis), as_expr(size)))
            index[axis] = var(loops[-1].var)
        unroll = int(config["cf_unroll"])
        if unroll > 1:
            loops[-1] = Loop(loops[-1].var, loops[-1].extent, "unroll", unroll)
        return nest(loops, reduce_body(stage, ctx, index, []))


def program() -> Program:
    return load(
        {
            "version": 1,
            "name": "axpb",
            "inputs": [{"name": "X", "shape": [9, 40], "dtype": "float32"}],
            "computes": [
                {
                    "name": "Y",
                    "axes": ["i", "j"],
                    "shape": [9, 40],
                    "dtype": "float32",
                    "expr": "2.0 * X[i, j] + 1.0",
                }
            ],
            "outputs": ["Y"],
        }
    )


def list_the_toy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU's injective templates with the toy one after them: the one list entry."""
    templates = [*BACKEND.schedules[INJECTIVE], ColumnsFirst()]
    monkeypatch.setitem(BACKEND.schedules, INJECTIVE, templates)  # type: ignore[arg-type]


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> None:
    list_the_toy(monkeypatch)


def test_one_template_is_the_space_and_a_second_adds_a_mode_knob(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    alone = space_for(program(), CPU)
    assert not any(name.endswith(".mode") for name in alone.knobs)
    list_the_toy(monkeypatch)
    joined = space_for(program(), CPU)
    assert list(joined.knobs) == ["s0.mode", *alone.knobs, "s0.cf_unroll"]
    assert joined.knobs["s0.mode"] == ("injective", "columns_first")
    assert joined.naive() == {"s0.mode": "injective", **alone.naive(), "s0.cf_unroll": 1}
    assert joined.default() == {"s0.mode": "injective", **alone.default(), "s0.cf_unroll": 1}
    meanings = {k.name: k.meaning for k in explain(program(), CPU).knobs}
    assert meanings["s0.mode"] == "the kernel: injective or columns_first"
    assert meanings["s0.cf_unroll"] == "unroll factor of the inner loop"


def test_the_mode_picks_the_template_that_checks_and_lowers(listed: None) -> None:
    space = space_for(program(), CPU)
    mine = {**space.naive(), "s0.mode": "columns_first", "s0.cf_unroll": 2}
    assert space.check(mine) is None
    other = {**space.naive(), "s0.cf_unroll": 2}  # the injective kernel with the toy's knob set
    assert "knobs of other modes than injective keep their first values" in (
        space.check(other) or ""
    )
    assert space.canonical(other) == space.naive()
    unrolled = {**space.naive(), "s0.mode": "columns_first", "s0.vec": 8, "s0.cf_unroll": 2}
    assert space.canonical(unrolled) == mine
    source = lower(program(), CPU, mine).source
    assert "#pragma GCC unroll 2" in source
    assert source.index("< 40") < source.index("< 9")  # the columns' loop is the outer one
    check_configs(program(), CPU, [mine], {})


def test_a_search_reaches_the_new_template(listed: None) -> None:
    space = space_for(program(), CPU)
    seeds = space.seeds()
    assert {**space.naive(), "s0.mode": "columns_first", "s0.cf_unroll": 4} in seeds
    proposed = create("random", space, seed=0).propose(24)
    picked = [c for c in proposed if c["s0.mode"] == "columns_first"]
    assert picked and all(space.check(c) is None for c in proposed)
    check_configs(program(), CPU, [*seeds, *picked[:2]], {})
