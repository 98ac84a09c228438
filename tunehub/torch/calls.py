"""A task's kernel as the optimized graph calls it, with the ops it replaced as its fallback.

The optimized graph calls a `TaskCall` where the task's ops were, `call(tensors, sizes)`:
`tensors` are the task's inputs in signature order (then any other tensor its ops read),
`sizes` the shape values its ops read (a dynamic reshape's). Within the dispatch table's
ranges it runs the kernel tuned nearest on the tensors' memory (CPU: the kernel's C entry on
`data_ptr()`s, no copies; CUDA: launched on the current stream), and otherwise the replaced
ops. It is a plain Python call, not a `torch.library` custom op: a custom op's dispatch cost
about twice an ATen op's call, more than a small kernel's run. What a call needs beyond its
outputs (the symbols' values, the entry, the outputs' shapes and dtypes) depends on the
inputs' shapes alone, so it is worked out once per shape (`_Plan`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tunehub.runtime.dispatch import DispatchKernel


@dataclass(frozen=True)
class _Plan:
    """How a call with inputs of one set of shapes runs: its symbols' values, the kernel,
    and each output's shape and dtype."""

    symbols: dict[str, int]
    kernel: Any
    outputs: tuple[tuple[tuple[int, ...], torch.dtype], ...]


@dataclass(eq=False)
class TaskCall:
    """One task of one optimized module: its kernel and the ops it replaces."""

    kernel: DispatchKernel
    fallback: torch.fx.GraphModule  # the replaced ops: (*tensors, *sizes) -> outputs
    inputs: int  # how many of `tensors` the kernel takes
    device: str  # the device type its kernels run on (`torch.device.type`)
    name: str = "task"
    stats: dict[str, int] = field(default_factory=lambda: {"kernel": 0, "fallback": 0})
    _plans: dict[tuple[Any, ...], _Plan | None] = field(default_factory=dict, repr=False)

    @property
    def __name__(self) -> str:  # how the fx graph's printed code names the call
        return self.name

    def symbols(self, tensors: Sequence[torch.Tensor]) -> dict[str, int] | None:
        """The symbols' values these inputs bind, or None where the kernel cannot take them
        (another device, shapes or dtypes off the signature, a symbol outside the tuned
        table's range)."""
        plan = self._plan(tensors)
        return None if plan is None else plan.symbols

    def __call__(self, tensors: Sequence[torch.Tensor], sizes: Sequence[int]) -> list[Any]:
        plan = self._plan(tensors)
        if plan is None:
            self.stats["fallback"] += 1
            return list(self.fallback(*tensors, *sizes))
        self.stats["kernel"] += 1
        return self._launch(plan, tensors[: self.inputs])

    def run(self, inputs: Sequence[torch.Tensor], values: dict[str, int]) -> list[torch.Tensor]:
        """The kernel tuned nearest `values`, on `inputs` (which it takes: `symbols`)."""
        plan = self._plan(inputs)
        assert plan is not None and plan.symbols == values, "inputs the kernel does not take"
        return self._launch(plan, inputs)

    def _launch(self, plan: _Plan, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        device = inputs[0].device
        outputs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in plan.outputs]
        inputs = [aligned(t) for t in inputs]
        if inputs[0].is_cuda:
            plan.kernel(*inputs, out=outputs)  # torch's current stream
        else:
            plan.kernel.launch([t.data_ptr() for t in (*inputs, *outputs)], plan.symbols)
        return outputs

    def _plan(self, tensors: Sequence[torch.Tensor]) -> _Plan | None:
        """The plan of inputs of these shapes, worked out on their first call."""
        inputs = tensors[: self.inputs]
        key = tuple((t.shape, t.dtype, t.device.type) for t in inputs)
        if key not in self._plans:
            self._plans[key] = self._new_plan(inputs)
        return self._plans[key]

    def _new_plan(self, inputs: Sequence[torch.Tensor]) -> _Plan | None:
        if any(t.device.type != self.device for t in inputs):
            return None
        arguments = self.kernel.arguments
        try:
            values = arguments.bind([(tuple(t.shape), _dtype(t)) for t in inputs], {})
        except ValueError:
            return None
        ranges = self.kernel.table.ranges
        if any(not (r.min <= values[name] <= r.max) for name, r in ranges.items()):
            return None
        index = self.kernel.table.entries.index(self.kernel.table.select(values))
        shapes = arguments.output_shapes(values)
        dtypes = [getattr(torch, arg.dtype) for arg in arguments.outputs]
        return _Plan(values, self.kernel.kernel(index), tuple(zip(shapes, dtypes, strict=True)))


def aligned(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` as every kernel takes its buffers (`runtime.abi`): contiguous and 16-byte
    aligned. A view that starts inside its storage at another offset (a slice) is copied."""
    tensor = tensor.contiguous()
    return tensor if tensor.data_ptr() % 16 == 0 else tensor.clone()


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")
