"""The target registry: a kind is one registry line plus its own folder. The toy target
(`tests/toy_target/`, known through TUNEHUB_TARGETS and nowhere else) is tuned by the CLI,
its kernel exported, loaded and run; unknown kinds are refused with the known ones named."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from tests.cli_process import run_tunehub
from tunehub.client import load_kernel
from tunehub.compiler.backend import compiler_backend
from tunehub.runtime.backend import runtime_backend
from tunehub.schemas.target import PLUGINS_ENV, Target, kinds, text_pattern
from tunehub.worker.backend import worker_backend

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PLUGINS_ENV, "tests.toy_target")


def test_the_builtin_kinds_each_have_every_facet() -> None:
    assert set(kinds()) == {"cpu", "cuda"}
    assert compiler_backend("cpu").language == "c"
    assert compiler_backend("cuda").language == "cuda"
    assert runtime_backend("cuda").artifact == "kernel.cubin"
    assert worker_backend("cpu").local_targets()[0].kind == "cpu"


def test_an_unknown_kind_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown target 'toy' \(expected cpu\[:ISA\] or cuda"):
        Target.parse("toy")
    with pytest.raises(ValueError, match="unknown target kind 'toy'"):
        Target(kind="toy")


def test_a_plugin_kind_is_known_where_the_environment_names_it(toy: None) -> None:
    target = Target.parse("toy:scalar")
    assert target.isa == "scalar" and str(target) == "toy:scalar"
    assert "toy" in Target.model_json_schema()["properties"]["kind"]["enum"]
    with pytest.raises(ValueError, match=r"unknown toy isa 'avx' \(one of scalar\)"):
        Target.parse("toy:avx")
    assert compiler_backend(target).language == runtime_backend("toyc").language == "toyc"


def test_the_toy_target_tunes_exports_and_runs(toy: None, tmp_path: Path) -> None:
    """Through the CLI in separate processes, which learn the kind from the environment."""
    signature = EXAMPLES / "matmul_128.json"
    db = f"sqlite:///{tmp_path / 'toy.db'}"
    assert os.environ[PLUGINS_ENV] == "tests.toy_target"
    tuned = run_tunehub("tune", signature, "--target", "toy", "--trials", "2", "--json", "--db", db)
    assert tuned.returncode == 0, tuned.stderr
    result = json.loads(tuned.stdout)
    assert result["target"] == "toy:scalar" and result["best"]["latency_s"] > 0
    out = tmp_path / "kernel"
    exported = run_tunehub(
        "kernel", result["workload_key"], "--target", "toy", "-o", out, "--db", db
    )
    assert exported.returncode == 0, exported.stderr
    assert (out / "kernel.toyc").read_text().startswith("/* toyc: tunehub's toy dialect */")
    kernel = load_kernel(out)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 128, 128), dtype=np.float32)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_the_toy_target_fuses_a_row_group(toy: None) -> None:
    """A row group on the toy target: its own `fused_rows` lays the rows out (one loop over
    them, every stage inside), and the fused kernel, plain C, computes what the reference
    does."""
    from tests.compiler.cbuild import run
    from tunehub.compiler.inputs import random_inputs
    from tunehub.compiler.lower import lower
    from tunehub.compiler.program import load
    from tunehub.compiler.reference import evaluate
    from tunehub.compiler.space import space_for
    from tunehub.compiler.verify import compare

    program = load(json.loads((EXAMPLES / "layernorm.json").read_text()))
    target = Target.parse("toy:scalar")
    space = space_for(program, target)
    fused = {**space.naive(), "g0.fuse": True}
    assert space.check(fused) is None
    kernel = lower(program, target, fused)
    assert kernel.source != lower(program, target, space.naive()).source
    inputs = random_inputs(program, {}, 0)
    actual = run(kernel, program, inputs, {}, "x86_64")["Y"]
    assert compare(evaluate(program, inputs, {})["Y"], actual, "float32", reduce_extent=1024).ok


def test_a_cpu_isa_names_its_features_once_each_in_their_order() -> None:
    target = Target.parse("cpu:x86_64-avx512+avx512_vnni+avx512_bf16")
    assert target.base == "x86_64-avx512" and target.features == ("avx512_vnni", "avx512_bf16")
    assert str(target) == "cpu:x86_64-avx512+avx512_vnni+avx512_bf16"
    assert re.fullmatch(text_pattern(), str(target))
    assert Target.parse("cpu:x86_64-avx2").features == ()
    assert Target.parse("cuda:sm_90").base == "sm_90"
    for bad, message in [
        ("cpu:x86_64-avx512+avx512_bf16+avx512_vnni", "in the order"),
        ("cpu:x86_64-avx512+avx512_bf16+avx512_bf16", "once"),
        ("cpu:x86_64-avx512+sse9", "unknown cpu feature 'sse9'"),
        ("cuda:sm_90+amx_tile", "unknown cuda arch"),
    ]:
        assert not re.fullmatch(text_pattern(), bad)
        with pytest.raises(ValueError, match=message):
            Target.parse(bad)
