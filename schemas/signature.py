"""Task signature, versions 1 and 2: the serialized compute definition users submit. The
versions differ only in what a 16-bit float sum or product adds (docs/signature.md).

These models check only the shape of the document (field types, name syntax, version).
Semantic validation (expressions, bounds, references) belongs to `compiler.program`.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tunehub.schemas.text import FreeText, Label

Dtype = Literal[
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint32",
    "uint8",
    "bool",
]
# The same names as a tuple, for code that iterates or checks membership at run time.
DTYPES: tuple[str, ...] = get_args(Dtype)
ReduceOp = Literal["sum", "max", "min", "prod"]

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
Name = Label
# A dimension is a literal extent or the name of a declared symbol.
Extent = int | Label


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SymbolDecl(_Strict):
    """A dynamic dimension and the range of values it may take."""

    min: int = Field(ge=1)
    max: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> SymbolDecl:
        if self.min > self.max:
            raise ValueError(f"symbol range is empty: min {self.min} > max {self.max}")
        return self


class TensorDecl(_Strict):
    name: Name = Field(pattern=NAME_PATTERN)
    shape: list[Extent] = Field(max_length=8)
    dtype: Dtype


class ReduceDecl(_Strict):
    op: ReduceOp
    axes: dict[Name, Extent] = Field(min_length=1, max_length=8)


class ComputeDecl(_Strict):
    name: Name = Field(pattern=NAME_PATTERN)
    axes: list[Name] = Field(max_length=8)
    shape: list[Extent] = Field(max_length=8)
    dtype: Dtype
    reduce: ReduceDecl | None = None
    expr: FreeText = Field(min_length=1, max_length=4096)

    @model_validator(mode="after")
    def _axes_match_shape(self) -> ComputeDecl:
        if len(self.axes) != len(self.shape):
            raise ValueError(
                f"compute {self.name!r} has {len(self.axes)} axes but a shape of rank "
                f"{len(self.shape)}"
            )
        return self


class TaskSignature(_Strict):
    """A tensor program: named inputs, a sequence of computes, and the outputs among them."""

    version: Literal[1, 2] = 1
    name: Label = Field(min_length=1, max_length=128)
    symbols: dict[Name, SymbolDecl] = Field(default_factory=dict, max_length=8)
    inputs: list[TensorDecl] = Field(min_length=1, max_length=32)
    computes: list[ComputeDecl] = Field(min_length=1, max_length=32)
    outputs: list[Name] = Field(min_length=1, max_length=8)
