"""Task set, version 2: the kernels of a model, as `tunehub extract` reads them off it.

A model is many kernels run many times; tuning it means tuning its distinct kernels on one
budget, each weighted by how often the model runs it. A task set is that list, written once by
a frontend (an ONNX file, TVM TIR text, a `torch.export` of a module) and handed to
`tunehub tune` or `tunehub submit`. It also says what the frontend could not map, so that a
user sees how much of the model the tuning covers, and (version 2) which ops need no kernel
of their own: views, and values computed once from constants. Version 1 documents, which
have no such list, are read as they are. `docs/taskset.md` describes the format.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tunehub.schemas.signature import Name, SymbolDecl, TaskSignature

# The most tasks one set may hold: a model's distinct kernels, with room. A tuning group holds
# fewer (`schemas.api.MAX_GROUP_TASKS`); a local `tunehub tune` takes them all.
MAX_TASKS = 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Task(_Strict):
    """One distinct kernel of the model: its signature, how many times one forward pass runs
    it, the model's ops it was made of (every occurrence's), and its FLOPs per run."""

    signature: TaskSignature
    weight: float = Field(gt=0, le=1e6)
    source_ops: list[str] = Field(default_factory=list)
    flops: int = Field(ge=0)


class LeftOut(_Strict):
    """Ops of one type left out for one reason: how many, their names, and their FLOPs where
    the frontend could count them (None where it could not)."""

    op: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    count: int = Field(ge=1)
    names: list[str] = Field(default_factory=list)
    flops: int | None = Field(default=None, ge=0)


class NoKernel(_Strict):
    """Ops of one type that need no kernel of their own, for one reason (a view, which its
    readers read through; a constant folded once): how many, their names, their FLOPs (those
    of a folded constant are spent once, when the model is loaded, not in a forward pass)."""

    op: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    count: int = Field(ge=1)
    names: list[str] = Field(default_factory=list)
    flops: int | None = Field(default=None, ge=0)


class Flops(_Strict):
    """The model's FLOPs, counted with every symbol at the values `at`: those of the tasks
    (times their weights) and of the whole model (the ops left out included, where known)."""

    at: dict[Name, int] = Field(default_factory=dict)
    covered: int = Field(ge=0)
    total: int = Field(ge=0)

    @model_validator(mode="after")
    def _covered_within_total(self) -> Flops:
        if self.covered > self.total:
            raise ValueError(f"covered FLOPs {self.covered} exceed the total {self.total}")
        return self

    @property
    def share(self) -> float:
        """The part of the model's FLOPs its tasks cover (1 for a model of no FLOPs)."""
        return self.covered / self.total if self.total else 1.0


class TaskSet(_Strict):
    """The distinct kernels of a model: identical tasks (one workload key) are one task whose
    weight is the sum of theirs. `symbols` are the model's dynamic dimensions; each task's
    signature declares those it uses, under the same names and with the same ranges."""

    version: Literal[1, 2] = 2
    source: str = Field(min_length=1, max_length=1024)
    symbols: dict[Name, SymbolDecl] = Field(default_factory=dict)
    tasks: list[Task] = Field(max_length=MAX_TASKS)
    left_out: list[LeftOut] = Field(default_factory=list)
    no_kernel: list[NoKernel] = Field(default_factory=list)
    flops: Flops

    @model_validator(mode="after")
    def _no_kernel_since_version_2(self) -> TaskSet:
        if self.version == 1 and self.no_kernel:
            raise ValueError("no_kernel is a field of task set version 2, not 1")
        return self

    @model_validator(mode="after")
    def _symbols_declared(self) -> TaskSet:
        for index, task in enumerate(self.tasks):
            for name, decl in task.signature.symbols.items():
                if self.symbols.get(name) != decl:
                    raise ValueError(
                        f"task {index} ({task.signature.name}): symbol {name!r} is not the "
                        "task set's (every symbol of a task is one of the set's, same range)"
                    )
        return self
