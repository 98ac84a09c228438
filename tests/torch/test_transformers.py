"""Hugging Face GPT-2 and Llama (random weights from small configs, nothing downloaded), eager
attention and sdpa, through the whole model path: extracted, every task tuned for one trial
(its naive kernel), optimized with every verified kernel taken. `optimize` checks each task's
kernel against eager at every place the model runs it (shapes, dtypes and values); every task
must pass, and the optimized logits must be eager's."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.cli_process import run_tunehub

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tunehub.frontends import torch_export  # noqa: E402
from tunehub.torch import optimize  # noqa: E402


class Logits(torch.nn.Module):
    """A causal language model returning its logits alone."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: Any) -> Any:
        return self.model(input_ids=ids).logits


def gpt2(attention: str) -> Any:
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=32,
        attn_implementation=attention,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(config)


def llama(attention: str) -> Any:
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=176, vocab_size=128, max_position_embeddings=32,
        attn_implementation=attention,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config)


@pytest.mark.parametrize(
    ("make", "attention"), [(gpt2, "eager"), (llama, "eager"), (llama, "sdpa")]
)
def test_every_task_of_a_transformer_runs_its_kernel_and_gives_eagers_logits(
    make: Any, attention: str, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    model = Logits(make(attention).eval()).eval()
    ids = torch.randint(0, 128, (1, 12))
    taskset = torch_export.export(model, (ids,))
    assert any(t.signature.name == "attention" for t in taskset.tasks)
    assert taskset.left_out == []  # embeddings are gathers, RoPE's cat a concat
    if make is llama:  # RoPE in the q and k projections' epilogues, in both layers
        names = [(t, t.signature.name) for t in taskset.tasks]
        rope = [t for t, name in names if name.startswith("linear") and "concat" in name]
        assert sum(t.weight for t in rope) == 4
    tasks = tmp_path / "tasks.json"
    tasks.write_text(taskset.model_dump_json())
    database = tmp_path / "tunehub.db"
    trials = len(taskset.tasks)  # one each: its naive kernel
    done = run_tunehub("tune", tasks, "--db", f"sqlite:///{database}", "--trials", trials)
    assert done.returncode == 0, done.stderr
    fast = optimize(model, (ids,), database, directory=tmp_path / "kernels", min_speedup=0)
    assert all(t.tuned for t in fast.report.tasks), str(fast.report)
    # Nothing runs whose value no one reads (GPT-2's eval dropouts, random ops to fx, once
    # kept the ops their kernels replaced running).
    dead = [n for n in fast.graph_module.graph.nodes if n.op == "call_function" and not n.users]
    assert dead == [], dead
    # A workload's race runs all its places per round, and its report says how many.
    places = Counter(t.workload_key for t in fast.report.tasks)
    for task in fast.report.tasks:
        assert task.race is not None
        together = f"its {places[task.workload_key]} places together" in str(task.race)
        assert together == (places[task.workload_key] > 1), str(task.race)
    with torch.no_grad():
        got, want = fast(ids), model(ids)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
