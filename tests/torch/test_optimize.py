"""`tunehub.torch.optimize` on a small model whose int4 linear is tuned for real (the local
tuner, a few trials, a SQLite database) and whose layer norm is not: the tuned task runs its
kernel as `tunehub::task`, the other keeps its ops and the report says why, outputs match
eager, and a shape outside the tuned range runs the replaced ops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli_process import run_tunehub

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from examples.models.gpt2_block import Int4Linear  # noqa: E402
from tunehub.frontends import torch_export  # noqa: E402
from tunehub.torch import optimize  # noqa: E402
from tunehub.torch.calls import aligned  # noqa: E402


class Small(nn.Module):
    """An int4 linear with a GELU, dropout and scale epilogue, then a layer norm: two tasks.
    The dropout (an identity in eval) is a random op to `torch.fx`: left dead inside the
    replaced ops, it kept them all running beside the kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.up = Int4Linear(64, 32, torch.Generator().manual_seed(0))
        self.drop = nn.Dropout(0.1)
        self.norm = nn.LayerNorm(32)

    def forward(self, x: Any) -> Any:
        return self.norm(2 * self.drop(nn.functional.gelu(self.up(x))))


def dynamic() -> Any:
    return ({0: torch.export.Dim("seq", min=1, max=16)},)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Small, Path]:
    """The model and a database holding a kernel of its int4 linear alone, tuned at seq=8."""
    directory = tmp_path_factory.mktemp("tuned")
    model = Small().eval()
    taskset = torch_export.export(model, (torch.randn(8, 64),), dynamic())
    linear = directory / "linear.json"
    linear.write_text(taskset.tasks[0].signature.model_dump_json())
    database = directory / "tunehub.db"
    done = run_tunehub(
        "tune", linear, "--db", f"sqlite:///{database}", "--trials", "4", "--symbol", "seq=8"
    )
    assert done.returncode == 0, done.stderr
    return model, database


def test_a_tuned_task_runs_its_kernel_and_the_output_matches_eager(
    tuned: tuple[Small, Path], tmp_path: Path
) -> None:
    model, database = tuned
    x = torch.randn(8, 64)
    fast = optimize(
        model, (x,), database, dynamic_shapes=dynamic(), directory=tmp_path, min_speedup=0
    )
    linear, norm = fast.report.tasks
    assert linear.tuned and linear.reason.startswith("tuned kernel (record")
    assert linear.source_ops[:2] == ["up/rshift", "up/and_1"]
    assert not norm.tuned and norm.reason.startswith("no verified kernel in the database")
    assert "1/2 tasks tuned" in str(fast.report)
    code = fast.graph_module.code
    assert "matmul_shift_right" in code and "rshift" not in code  # the task's call, not its ops
    # The whole module was raced against the eager one, and the report says which won.
    assert fast.report.module is not None and "whole module, one forward pass" in str(fast.report)
    with torch.no_grad():
        for seq in (8, 3, 16):
            x = torch.randn(seq, 64)
            torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-5)
        # A view starting 4 bytes into its storage reaches the kernel as an aligned copy.
        x = torch.randn(5 * 64 + 1)[1:].view(5, 64)
        assert x.data_ptr() % 16 and aligned(x).data_ptr() % 16 == 0
        torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-5)
    (call,) = fast.calls
    assert call.stats == {"kernel": 4, "fallback": 0}


def test_a_shape_outside_the_tuned_range_runs_the_original_ops(
    tuned: tuple[Small, Path], tmp_path: Path
) -> None:
    model, database = tuned
    fast = optimize(
        model,
        (torch.randn(8, 64),),
        database,
        dynamic_shapes=dynamic(),
        directory=tmp_path,
        min_speedup=0,
        verbose=False,
    )
    x = torch.randn(40, 64)  # seq=40: the kernels serve 1..16
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), rtol=1e-5, atol=1e-6)
    (call,) = fast.calls
    assert call.stats == {"kernel": 0, "fallback": 1}


def test_a_missing_kernel_or_database_keeps_every_op(tmp_path: Path) -> None:
    model = Small().eval()
    x = torch.randn(4, 64)
    fast = optimize(model, (x,), tmp_path / "none.db", verbose=False)
    assert [t.tuned for t in fast.report.tasks] == [False, False]
    assert {t.reason for t in fast.report.tasks} == {f"no database at {tmp_path / 'none.db'}"}
    assert fast.calls == [] and "tunehub" not in fast.graph_module.code
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x))


def test_a_kernel_slower_than_eager_is_not_used(tuned: tuple[Small, Path], tmp_path: Path) -> None:
    """No kernel is a million times faster than the ops it replaces: the bar refuses it and
    the report gives both times."""
    model, database = tuned
    fast = optimize(
        model,
        (torch.randn(8, 64),),
        database,
        dynamic_shapes=dynamic(),
        directory=tmp_path,
        min_speedup=1e6,
        verbose=False,
    )
    linear = fast.report.tasks[0]
    assert not linear.tuned and linear.reason.startswith("its kernel is not faster: ")
    assert "speedup by round" in linear.reason
    assert linear.reason.endswith(": first quartile not above 1e+06")
    assert linear.race is not None and not linear.race.won
    assert fast.calls == [] and fast.report.module is None


class Trio(nn.Module):
    """Three tasks that compile to the same bytes: one row sum, its output in three shapes
    that differ only in unit axes (kept dimensions, and a view the sum reads through)."""

    def forward(self, x: Any, y: Any, z: Any) -> Any:
        return x.sum(1), y.sum(1, keepdim=True), z.unsqueeze(0).sum(-1, keepdim=True)


def test_tasks_that_share_one_kernel_each_return_their_own_shapes(tmp_path: Path) -> None:
    """The kernel's bytes are one artifact for three workloads; each task's call returns its
    workload's shape (and eager's values), not the shape of the workload stored first."""
    from tunehub.server.db.records import list_records
    from tunehub.server.db.session import make_engine, session_factory, session_scope

    model = Trio().eval()
    inputs = tuple(torch.randn(4, 16) for _ in range(3))
    tasks = tmp_path / "tasks.json"
    tasks.write_text(torch_export.export(model, inputs).model_dump_json())
    database = tmp_path / "tunehub.db"
    # One trial a task: each its naive config, where the three compile to the same code.
    done = run_tunehub("tune", tasks, "--db", f"sqlite:///{database}", "--trials", "3")
    assert done.returncode == 0, done.stderr
    with session_scope(session_factory(make_engine(f"sqlite:///{database}"))) as s:
        artifacts = {r.artifact_sha256 for r in list_records(s, limit=10)}
    assert len(artifacts) == 1, "the three tasks no longer share their kernel's bytes"

    fast = optimize(model, inputs, database, directory=tmp_path / "kernels", min_speedup=0)
    assert [t.tuned for t in fast.report.tasks] == [True, True, True], str(fast.report)
    with torch.no_grad():
        got, want = fast(*inputs), model(*inputs)
    assert [tuple(t.shape) for t in got] == [(4,), (4, 1), (1, 4, 1)]
    torch.testing.assert_close(got, want)
    assert [call.stats["kernel"] for call in fast.calls] == [1, 1, 1]


def test_a_folded_constant_is_computed_once_per_shape(tmp_path: Path) -> None:
    """The causal mask depends on the sequence length alone: the optimized module computes
    it once for each length it is called with, and its outputs are eager's."""
    from tests.frontends.test_torch import CausalAttention, attention_dims
    from tunehub.torch.constants import Folded

    model = CausalAttention().eval()
    fast = optimize(
        model,
        (torch.randn(1, 6, 32),),
        tmp_path / "none.db",
        dynamic_shapes=attention_dims(),
        verbose=False,
    )
    (folded,) = [m for m in fast.graph_module.modules() if isinstance(m, Folded)]
    with torch.no_grad():
        for seq in (6, 9, 6, 9, 3):
            x = torch.randn(1, seq, 32)
            torch.testing.assert_close(fast(x), model(x))
    assert sorted(folded._computed) == [(3,), (6,), (9,)]
