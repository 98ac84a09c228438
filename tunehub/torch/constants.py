"""The values of a model that depend on its weights and its inputs' shapes alone (a causal
mask, position ids, RoPE's cos/sin tables): computed once per shape, not in every forward
pass.

The frontend says which values these are (`frontends.fusion`: folded constants). `fold`
moves the ops computing them out of the graph into one `Folded` submodule, called where the
graph first needs one of them, which runs those ops on a call with shapes it has not seen and
hands back what it computed then on every later call. Its key is the shape values the ops
read (none for a model exported with static shapes: the values are computed once).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import torch

from tunehub.torch.subgraph import subgraph

Replacements = dict[torch.fx.Node, torch.fx.Node]


class Folded(torch.nn.Module):
    """Ops computing constants, run once per distinct value of their non-tensor arguments
    (shape values; their tensor arguments are weights, which never change)."""

    def __init__(self, ops: torch.fx.GraphModule) -> None:
        super().__init__()
        self.ops = ops
        self._computed: dict[tuple[Any, ...], tuple[torch.Tensor, ...]] = {}

    def forward(self, *arguments: Any) -> tuple[torch.Tensor, ...]:
        key = tuple(a for a in arguments if not isinstance(a, torch.Tensor))
        if key not in self._computed:
            with torch.no_grad():
                self._computed[key] = tuple(self.ops(*arguments))
        return self._computed[key]


def fold(graph: torch.fx.GraphModule, names: Iterable[str]) -> Replacements:
    """Move the nodes named `names` (and the views and shape arithmetic they read) into a
    `Folded` submodule of `graph`; the node that now stands for each of them where others
    read it. Nothing changes where no node is named."""
    by_name = {node.name: node for node in graph.graph.nodes}
    members: set[torch.fx.Node] = set()
    arguments: dict[torch.fx.Node, None] = {}
    pending = [by_name[name] for name in names if name in by_name]
    while pending:
        node = pending.pop()
        if node in members:
            continue
        members.add(node)
        for arg in node.all_input_nodes:
            if arg.op == "placeholder" or not isinstance(arg.meta.get("val"), torch.Tensor):
                arguments[arg] = None  # a weight, or a shape value the graph computes
            else:
                pending.append(arg)
    if not members:
        return {}
    order = [node for node in graph.graph.nodes if node in members]
    outputs = [node for node in order if any(user not in members for user in node.users)]
    if not outputs:
        return {}
    position = {node: n for n, node in enumerate(graph.graph.nodes)}
    first_user = next(n for n in graph.graph.nodes if n not in members and _reads(n, outputs))
    if any(position[a] > position[first_user] for a in arguments):
        return {}  # a shape value computed after the first use: the ops stay where they are
    name = _free_name(graph, "folded")
    graph.add_submodule(name, Folded(subgraph(order, list(arguments), outputs)))
    replaced: Replacements = {}
    with graph.graph.inserting_before(first_user):
        call = graph.graph.call_module(name, tuple(arguments))
        for index, output in enumerate(outputs):
            item = graph.graph.call_function(operator.getitem, (call, index))
            item.meta = dict(output.meta)
            output.replace_all_uses_with(item, delete_user_cb=lambda user: user not in members)
            replaced[output] = item
    return replaced


def _reads(node: torch.fx.Node, values: list[torch.fx.Node]) -> bool:
    return any(arg in values for arg in node.all_input_nodes)


def _free_name(graph: torch.fx.GraphModule, base: str) -> str:
    n = 0
    while hasattr(graph, f"{base}{n}"):
        n += 1
    return f"{base}{n}"
