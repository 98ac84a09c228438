"""A task's kernel as a `torch.library` custom op, `tunehub::task`, with its fallback.

The optimized graph calls `tunehub::task(call, tensors, sizes)` where the task's ops were:
`call` names a `TaskCall` (the kernel, the ops it replaced, the symbol ranges it serves),
`tensors` are the task's inputs in signature order (then any other tensor its ops read),
`sizes` the shape values its ops read (a dynamic reshape's). Each call binds the symbols from
the inputs' shapes; within the dispatch table's ranges it runs the kernel tuned nearest on the
tensors' memory (CPU: the kernel's C entry on `data_ptr()`s, no copies; CUDA: launched on the
current stream), and otherwise the replaced ops. The op's fake implementation is the replaced
ops too, so the optimized module traces like the original.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tunehub.runtime.dispatch import DispatchKernel

# The live calls, by name (numbered in this process): the optimized modules hold them, the op
# finds them here.
_CALLS: weakref.WeakValueDictionary[str, TaskCall] = weakref.WeakValueDictionary()
_NUMBERS = itertools.count()


@dataclass(eq=False)
class TaskCall:
    """One task of one optimized module: its kernel and the ops it replaces."""

    kernel: DispatchKernel
    fallback: torch.fx.GraphModule  # the replaced ops: (*tensors, *sizes) -> outputs
    inputs: int  # how many of `tensors` the kernel takes
    device: str  # the device type its kernels run on (`torch.device.type`)
    stats: dict[str, int] = field(default_factory=lambda: {"kernel": 0, "fallback": 0})
    name: str = field(default_factory=lambda: f"call{next(_NUMBERS)}")

    def __post_init__(self) -> None:
        _CALLS[self.name] = self

    def symbols(self, tensors: Sequence[torch.Tensor]) -> dict[str, int] | None:
        """The symbols' values these inputs bind, or None where the kernel cannot take them
        (another device, shapes or dtypes off the signature, a symbol outside the tuned
        table's range)."""
        if any(t.device.type != self.device for t in tensors[: self.inputs]):
            return None
        arguments = self.kernel.arguments
        shapes = [(tuple(t.shape), _dtype(t)) for t in tensors[: self.inputs]]
        try:
            values = arguments.bind(shapes, {})
        except ValueError:
            return None
        ranges = self.kernel.table.ranges
        if any(not (r.min <= values[name] <= r.max) for name, r in ranges.items()):
            return None
        return values

    def __call__(self, tensors: Sequence[torch.Tensor], sizes: Sequence[int]) -> list[Any]:
        values = self.symbols(tensors)
        if values is None:
            self.stats["fallback"] += 1
            return _fresh(self.fallback(*tensors, *sizes), tensors)
        self.stats["kernel"] += 1
        return self.run(tensors[: self.inputs], values)

    def run(self, inputs: Sequence[torch.Tensor], values: dict[str, int]) -> list[torch.Tensor]:
        """The kernel tuned nearest `values`, on `inputs` (which it takes: `symbols`)."""
        index = self.kernel.table.entries.index(self.kernel.table.select(values))
        kernel = self.kernel.kernel(index)
        arguments = self.kernel.arguments
        device = inputs[0].device
        outputs = [
            torch.empty(shape, dtype=getattr(torch, arg.dtype), device=device)
            for arg, shape in zip(arguments.outputs, arguments.output_shapes(values), strict=True)
        ]
        inputs = [aligned(t) for t in inputs]
        if inputs[0].is_cuda:
            kernel(*inputs, out=outputs)  # torch's current stream
        else:
            kernel.launch([t.data_ptr() for t in (*inputs, *outputs)], values)
        return outputs


def aligned(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` as every kernel takes its buffers (`runtime.abi`): contiguous and 16-byte
    aligned. A view that starts inside its storage at another offset (a slice) is copied."""
    tensor = tensor.contiguous()
    return tensor if tensor.data_ptr() % 16 == 0 else tensor.clone()


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _fresh(outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]) -> list[Any]:
    """The outputs, each copied if it shares memory with an input (a custom op's outputs may
    not alias its inputs; replaced ops that only reshape would)."""
    held = {t.untyped_storage().data_ptr() for t in inputs}
    return [o.clone() if o.untyped_storage().data_ptr() in held else o for o in outputs]


@functools.cache
def task_op() -> Any:
    """`torch.ops.tunehub.task.default`, defined on first use (importing this module defines
    nothing)."""

    @torch.library.custom_op("tunehub::task", mutates_args=())
    def task(call: str, tensors: list[torch.Tensor], sizes: list[int]) -> list[torch.Tensor]:
        return _CALLS[call](tensors, sizes)

    @task.register_fake
    def _(call: str, tensors: list[torch.Tensor], sizes: list[int]) -> list[torch.Tensor]:
        return list(_CALLS[call].fallback(*tensors, *sizes))

    return torch.ops.tunehub.task.default
