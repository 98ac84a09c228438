"""`tunehub extract`, run as a user runs it, and `tunehub tune` on the task set it writes:
one tuning of every task on one budget, each weighted as the set says; malformed models and
misused task sets refused in one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli_process import run_tunehub, tunehub_argv
from tests.frontends.test_tir import SCHEDULED
from tests.frontends.tir_texts import MLC_INT4_LINEAR, SOFTMAX, module
from tunehub.schemas.taskset import TaskSet

SCALE = """
    @T.prim_func
    def scale(p_x: T.handle, p_y: T.handle):
        n = T.int64()
        x = T.match_buffer(p_x, (n, T.int64(16)))
        y = T.match_buffer(p_y, (n, T.int64(16)))
        for i, j in T.grid(n, T.int64(16)):
            with T.block("y"):
                v_i, v_j = T.axis.remap("SS", [i, j])
                y[v_i, v_j] = T.tanh(x[v_i, v_j]) * T.float32(3)
"""


def assert_user_error(done: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert fragment in lines[0], lines[0]


def test_extract_tir_writes_a_task_set_and_prints_its_summary(tmp_path: Path) -> None:
    source = tmp_path / "model.py"
    renamed = MLC_INT4_LINEAR.replace("add7_add8", "add9_add10")
    source.write_text(module(MLC_INT4_LINEAR, renamed, SOFTMAX))
    out = tmp_path / "tasks.json"
    done = run_tunehub("extract", source, "-o", out, "--range", "seq_len=1..2048")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("tir:model.py: 2 tasks, 100.0% of the model's")
    assert "symbols: seq_len 1..2048, n 1..4096 (FLOPs counted at seq_len=64, n=64)" in done.stdout
    assert done.stdout.rstrip().endswith(f"wrote {out}")
    taskset = TaskSet.model_validate_json(out.read_text())
    assert [t.weight for t in taskset.tasks] == [2, 1]
    for task in taskset.tasks:  # every signature valid as `tunehub validate` has it
        path = tmp_path / f"{task.signature.name}.json"
        path.write_text(task.signature.model_dump_json())
        assert run_tunehub("validate", path).returncode == 0


def test_extract_lists_a_model_of_nothing_it_can_map(tmp_path: Path) -> None:
    source = tmp_path / "scheduled.py"
    source.write_text(module(SCHEDULED))
    done = run_tunehub("extract", source, "-o", tmp_path / "empty.json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("tir:scheduled.py: no tasks, every op was left out")
    assert "left out: 1 ops" in done.stdout and "a scheduled function" in done.stdout
    assert_user_error(run_tunehub("tune", tmp_path / "empty.json"), "the task set has no tasks")


def test_extract_refuses_what_it_cannot_read_in_one_line(tmp_path: Path) -> None:
    bad_tir = tmp_path / "bad.py"
    bad_tir.write_text("def f(:\n")
    assert_user_error(run_tunehub("extract", bad_tir), "bad.py: not TVMScript: line 1")
    assert_user_error(run_tunehub("extract", tmp_path / "none.py"), "cannot read")
    assert_user_error(run_tunehub("extract"), "name a MODEL file or --torch")
    assert_user_error(run_tunehub("extract", bad_tir, "--range", "n=0..4"), "1 <= MIN <= MAX")
    assert_user_error(run_tunehub("extract", "--torch", "nocolon"), "MODULE:FACTORY")


def test_extract_refuses_a_malformed_onnx_file_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07\x12\x00garbage")
    assert_user_error(run_tunehub("extract", bad), "bad.onnx: not a valid ONNX model")


FACTORIES = """
import torch

class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(8, 16)

    def forward(self, x):
        return torch.relu(self.up(x))

def make():
    tokens = torch.export.Dim("tokens", max=1024)
    return Mlp(), (torch.randn(4, 8),), ({0: tokens},)

def wrong():
    return Mlp()

def broken():
    raise ValueError("no weights here")
"""


def test_extract_torch_runs_the_named_factory(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "mymodel.py").write_text(FACTORIES)

    def extract(spec: str) -> subprocess.CompletedProcess[str]:
        argv = tunehub_argv("extract", "--torch", spec, "-o", "tasks.json")
        return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)

    done = extract("mymodel:make")
    assert done.returncode == 0, done.stderr
    taskset = TaskSet.model_validate_json((tmp_path / "tasks.json").read_text())
    (task,) = taskset.tasks
    assert task.signature.name == "linear_relu" and set(task.signature.symbols) == {"tokens"}
    assert_user_error(extract("mymodel:wrong"), "it must return (module, example_inputs)")
    assert_user_error(extract("mymodel:missing"), "mymodel has no missing to call")
    assert_user_error(extract("mymodel:broken"), "mymodel:broken failed: ValueError: no weights")
    assert_user_error(extract("nomodule:make"), "cannot import nomodule")


@pytest.fixture(scope="module")
def taskset_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("taskset")
    source = tmp / "small.py"
    source.write_text(module(SOFTMAX, SCALE, SCALE.replace("def scale", "def scale_again")))
    done = run_tunehub("extract", source, "-o", tmp / "tasks.json", "--range", "n=1..256")
    assert done.returncode == 0, done.stderr
    return tmp / "tasks.json"


def test_tune_a_task_set_on_one_budget(taskset_file: Path, tmp_path: Path) -> None:
    """Its tasks with their weights, every symbol value named a task of its own."""
    db = f"sqlite:///{tmp_path / 'tunehub.db'}"
    done = run_tunehub("tune", taskset_file, "--trials", "8", "--symbol", "n=8,32", "--json",
                       "--db", db)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    tasks = result["tasks"]
    assert [(t["symbols"], t["weight"]) for t in tasks] == [
        ({"n": 8}, 1.0),
        ({"n": 32}, 1.0),
        ({"n": 8}, 2.0),
        ({"n": 32}, 2.0),
    ]
    assert result["total_trials"] <= 8 and all(t["best"] for t in tasks)


def test_task_sets_are_tuned_alone_with_their_own_weights(taskset_file: Path) -> None:
    signature = taskset_file.parent / "one.json"
    taskset = TaskSet.model_validate_json(taskset_file.read_text())
    signature.write_text(taskset.tasks[0].signature.model_dump_json())
    assert_user_error(run_tunehub("tune", taskset_file, "--weights", "1,2"), "leave --weights out")
    assert_user_error(run_tunehub("tune", taskset_file, signature), "give it as the only file")
    server = ["--server", "http://127.0.0.1:9"]  # never reached
    assert_user_error(run_tunehub("submit", taskset_file, "--symbol", "n=999", *server),
                      "symbol n=999 is outside its range [1, 256]")  # fmt: skip
    broken = taskset_file.parent / "broken.json"
    broken.write_text(json.dumps({"tasks": [{"weight": -1}]}))
    assert_user_error(run_tunehub("tune", broken), "broken.json: invalid task set:")
