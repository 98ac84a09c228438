"""Program spaces: knob layout, naive/default/sample/mutate validity, constraints, and the
property that for random valid programs the naive config and sampled configs compute what
the reference evaluator computes."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.compiler.cbuild import HOST, check_configs
from tests.strategies import signatures, symbol_values
from tunehub.compiler.analysis import Stage
from tunehub.compiler.backend import schedule_for
from tunehub.compiler.lower import kernel_of, lower, lower_function
from tunehub.compiler.program import load
from tunehub.compiler.space import ProgramSpace, space_for
from tunehub.compiler.space.program import group_knob, stage_prefix
from tunehub.compiler.space.space import Config
from tunehub.schemas.target import Target

CPU = HOST  # the kernels are run here
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def space(name: str, target: Target = CPU) -> ProgramSpace:
    return space_for(load(json.loads((EXAMPLES / f"{name}.json").read_text())), target)


def test_knobs_are_prefixed_per_stage_and_group() -> None:
    knobs = space("softmax").knobs
    assert {k.split(".")[0] for k in knobs} == {"s0", "s1", "s2", "g0"}
    assert knobs["g0.fuse"] == (False, True)
    avx512 = space("softmax", Target(kind="cpu", isa="x86_64-avx512")).knobs
    assert avx512["s0.vec"] == (0, 4, 8, 16)
    assert set(space("gelu").knobs) == {
        "s0.tile_r",
        "s0.tile_c",
        "s0.parallel",
        "s0.vec",
        "s0.unroll",
    }


def test_vector_widths_follow_the_target_and_dtype() -> None:
    assert space("gelu", Target(kind="cpu", isa="x86_64-avx2")).knobs["s0.vec"] == (0, 4, 8)
    assert space("gelu", Target(kind="cpu", isa="generic")).knobs["s0.vec"] == (0, 4)


@pytest.mark.parametrize("name", ["softmax", "matmul_odd", "column_sum", "gelu", "int4_matmul"])
def test_naive_default_samples_and_mutations_are_valid(name: str) -> None:
    s = space(name)
    rng = random.Random(0)
    assert s.check(s.naive()) is None and s.check(s.default()) is None
    for _ in range(20):
        config = s.sample(rng)
        assert s.check(config) is None
        mutated = s.mutate(config, rng)
        assert s.check(mutated) is None
        # one knob changed, and those the change leaves unused back at their first values
        changed = [k for k in config if mutated[k] != config[k]]
        assert not changed or any(
            s.canonical({**config, k: mutated[k]}) == mutated for k in changed
        )


def test_naive_and_default_differ_where_it_matters() -> None:
    s = space("softmax")
    assert s.naive()["g0.fuse"] is False and s.default()["g0.fuse"] is True
    assert all(v in (0, 1, False) for k, v in s.naive().items() if not k.endswith("tile_r"))


def test_constraints_are_explained() -> None:
    s = space("column_sum")
    naive = s.naive()
    reason = s.check({**naive, "s0.split": True, "s0.cols": 16})
    assert reason is not None and reason.startswith("stage 0 (Y): split")
    assert "nothing to interleave" in (s.check({**naive, "s0.vec": 4, "s0.unroll": 2}) or "")
    gelu = space("gelu")
    assert "outer loops" in (gelu.check({**gelu.naive(), "s0.parallel": 2}) or "")


def test_space_knobs_reach_the_code() -> None:
    s = space("softmax")
    program = s.program
    fused = lower(program, CPU, s.default()).source
    assert fused.count("#pragma omp parallel for") == 1
    parallel = {k: 1 for k in s.knobs if k.endswith(".parallel")}
    unfused = {**s.canonical({**s.default(), "g0.fuse": False}), **parallel}
    assert lower(program, CPU, unfused).source.count("#pragma omp parallel for") == 3


def test_a_fused_row_keeps_the_knobs_it_leaves_unused_at_their_first_values() -> None:
    """Inside a fused row a stage has no parallel loop of its own, and a row sum no column
    order: configs that differ only there are one kernel, so one config."""
    s = space("softmax")
    fused = s.default()
    assert {fused[f"s{n}.parallel"] for n in range(3)} == {0}
    assert fused["s0.cols"] == fused["s0.split"] == 0
    for knob, value in (
        ("s0.parallel", 1),
        ("s1.split", True),
        ("s1.cols", 16),
        ("s2.parallel", 1),
    ):
        varied = {**fused, knob: value}
        assert s.check(varied) is not None, knob
        assert s.canonical(varied) == fused
    reason = s.check({**fused, "s0.parallel": 1}) or ""
    assert "knobs that leave its kernel unchanged keep their first values" in reason
    rng = random.Random(0)
    drawn = [s.sample(rng) for _ in range(200)]
    assert all(s.check(c) is None for c in drawn)
    assert any(c["g0.fuse"] for c in drawn) and any(not c["g0.fuse"] for c in drawn)


# A GEMM whose every output a fused row group's later stage reads (rows = both its axes).
MATMUL_EXPANDED = {
    "version": 1,
    "name": "matmul_expanded",
    "inputs": [
        {"name": "A", "shape": [64, 32], "dtype": "float32"},
        {"name": "B", "shape": [32, 48], "dtype": "float32"},
        {"name": "Z", "shape": [64, 48, 8], "dtype": "float32"},
    ],
    "computes": [
        {
            "name": "C",
            "axes": ["i", "j"],
            "shape": [64, 48],
            "dtype": "float32",
            "reduce": {"op": "sum", "axes": {"k": 32}},
            "expr": "A[i, k] * B[k, j]",
        },
        {
            "name": "D",
            "axes": ["i", "j", "l"],
            "shape": [64, 48, 8],
            "dtype": "float32",
            "expr": "C[i, j] * Z[i, j, l]",
        },
    ],
    "outputs": ["D"],
}


class _AnyForm(ProgramSpace):
    """The space with every form of a fused row's stage config admitted, canonical or not:
    what each lowers to is the question."""

    def _canonical_stage(self, stage: Stage, config: Config, own: Config) -> Config:
        return schedule_for(stage, self.target).canonical(stage, self.target, own)


@pytest.mark.parametrize("target", [CPU, Target(kind="cuda", arch="sm_90")], ids=str)
@pytest.mark.parametrize("name", ["softmax", "layernorm", "rmsnorm", "matmul_expanded"])
def test_in_a_fused_row_one_kernel_has_one_config(name: str, target: Target) -> None:
    """Changing one knob of a fused row group's stage changes the kernel exactly when it
    changes the canonical config (no knob merged that matters, none left that does not)."""
    document = MATMUL_EXPANDED if name == "matmul_expanded" else None
    program = load(document or json.loads((EXAMPLES / f"{name}.json").read_text()))
    s, any_form = space_for(program, target), _AnyForm(program, target)
    fused = {group_knob(n): True for n in range(len(s.analysis.groups))}
    rng = random.Random(name)
    bases = [s.default(), *(s.canonical({**s.sample(rng), **fused}) for _ in range(2))]
    knobs = [
        k
        for group in s.analysis.groups
        for n in group.stages
        for k in s.knobs
        if k.startswith(stage_prefix(s.analysis.stages[n]))
    ]
    for base in (b for b in bases if s.check(b) is None):
        kernel = lower(program, target, base).source
        for knob in knobs:
            for value in s.knobs[knob]:
                varied = {**base, knob: value}
                if value == base[knob] or any_form.check(varied) is not None:
                    continue
                same = lower_function(program, target, varied, any_form)
                assert (kernel_of(same, target.kind).source == kernel) == (
                    s.canonical(varied) == base
                ), f"{knob}={value}"


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_random_programs_agree_with_the_reference(data: st.DataObject) -> None:
    signature: dict[str, Any] = data.draw(signatures())
    symbols = data.draw(symbol_values(signature))
    program = load(signature)
    s = space_for(program, CPU)
    seed = data.draw(st.integers(0, 2**16))
    rng = random.Random(seed)
    configs = [s.naive(), s.default(), s.sample(rng), s.sample(rng)]
    check_configs(program, CPU, configs, symbols, seed=seed)


def test_sampling_covers_each_stage_uniformly() -> None:
    """Stage-wise sampling: every valid value of a knob shows up, even in a many-stage space."""
    s = space("layernorm")
    rng = random.Random(3)
    seen: dict[str, set[object]] = {k: set() for k in s.knobs}
    for _ in range(300):
        config = s.sample(rng)
        for k, v in config.items():
            seen[k].add(v)
    assert all(seen[k] == set(values) for k, values in s.knobs.items())
