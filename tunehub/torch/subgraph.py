"""A part of an fx graph as a graph of its own: what `tunehub::task` falls back to, and what
`constants.Folded` runs once."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def subgraph(
    members: Sequence[torch.fx.Node],
    arguments: Sequence[torch.fx.Node],
    outputs: Sequence[torch.fx.Node],
) -> torch.fx.GraphModule:
    """`members` (in graph order) as a graph of their own: `(*arguments) -> outputs`."""
    graph = torch.fx.Graph()
    env = {a: graph.placeholder(f"arg{n}") for n, a in enumerate(arguments)}
    for member in members:
        env[member] = graph.node_copy(member, lambda a: env[a])
    graph.output([env[o] for o in outputs])
    return torch.fx.GraphModule(torch.nn.Module(), graph)
