"""Compilation targets: a CUDA architecture or a CPU instruction set, and the registry of target
kinds.

A target kind is one line of `BUILTIN_KINDS`: how its wire form names a variant (`arch` or
`isa`), the variants it accepts, and the package that implements it (`tunehub.targets.<kind>`).
That package holds the whole target, in three facets that each layer loads when it needs them
(`TargetKind.facet`): `compiler` (language, renderer, schedules, device limits), `worker`
(builder, runner, device detection) and `runtime` (artifact files and the loader). Nothing else
in tunehub tests a kind by name.

A kind from outside tunehub (a plugin's, or the tests' toy target) is a package whose
`__init__` defines `KIND`, named in `TUNEHUB_TARGETS` (comma-separated module names): an
environment variable, so that every process of a tuning (build pools, workers, measuring
children) knows the same kinds.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

CPU_ISAS = ("x86_64-avx512", "x86_64-avx2", "x86_64", "aarch64-neon", "generic")
# The CPU's dot-product and matrix engines, which a CPU ISA names after its base in this order,
# each after a `+` (`x86_64-avx512+avx512_vnni+avx512_bf16`): a kernel that uses one is built
# with its flags and never run where the instruction is missing. An ISA without any is the
# base alone, as before they existed, so older clients' and records' targets are unchanged.
CPU_FEATURES = (
    "avx_vnni",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)

# The longest target text stored or accepted: a CPU ISA with every feature is 89 characters
# (`cpu:x86_64-avx512+avx_vnni+...+amx_int8`), past the 64 that targets once had.
TARGET_LENGTH = 255


@dataclass(frozen=True)
class TargetKind:
    """One kind of target. `choices` lists every variant where they are few (CPU ISAs);
    otherwise `pattern` says what a variant looks like (`sm_90`, like `example`)."""

    name: str
    field: Literal["arch", "isa"]
    example: str
    package: str
    choices: tuple[str, ...] = ()
    pattern: str = ""
    features: tuple[str, ...] = ()

    def check(self, variant: str) -> None:
        """ValueError unless `variant` names one of this kind's variants: a base variant and,
        where the kind has `features`, some of them, each after a `+`, in their order."""
        base, extras = self.split(variant)
        if self.choices and base not in self.choices:
            raise ValueError(
                f"unknown {self.name} {self.field} {variant!r} (one of {', '.join(self.choices)})"
            )
        if self.pattern and not re.fullmatch(self.pattern, base):
            raise ValueError(
                f"unknown {self.name} {self.field} {variant!r} (expected e.g. {self.example!r})"
            )
        unknown = [f for f in extras if f not in self.features]
        if unknown:
            known = ", ".join(self.features) or "none"
            raise ValueError(
                f"unknown {self.name} feature {unknown[0]!r} in {variant!r} (known: {known})"
            )
        if list(extras) != sorted(set(extras), key=self.features.index):
            raise ValueError(
                f"{self.name} features in {variant!r} must each appear once, in the order "
                f"{', '.join(self.features)}"
            )

    def split(self, variant: str) -> tuple[str, tuple[str, ...]]:
        """`variant`'s base and its features (`x86_64-avx512+avx512_bf16` ->
        `x86_64-avx512`, `(avx512_bf16,)`); a kind without features has none."""
        if not self.features:
            return variant, ()
        base, *extras = variant.split("+")
        return base, tuple(extras)

    def facet(self, name: Literal["compiler", "worker", "runtime"]) -> Any:
        """The `BACKEND` object of this kind's `name` facet (`<package>.<name>`), imported
        only now: a client that loads kernels never imports a compiler."""
        return importlib.import_module(f"{self.package}.{name}").BACKEND


BUILTIN_KINDS = (
    TargetKind(
        "cpu",
        "isa",
        "x86_64-avx2",
        "tunehub.targets.cpu",
        choices=CPU_ISAS,
        features=CPU_FEATURES,
    ),
    TargetKind("cuda", "arch", "sm_90", "tunehub.targets.cuda", pattern=r"sm_[0-9]{2,3}a?"),
)
PLUGINS_ENV = "TUNEHUB_TARGETS"


def kinds() -> dict[str, TargetKind]:
    """Every known target kind by name: the built-in ones, then those of TUNEHUB_TARGETS."""
    return _kinds(os.environ.get(PLUGINS_ENV, ""))


@cache
def _kinds(plugins: str) -> dict[str, TargetKind]:
    found = {kind.name: kind for kind in BUILTIN_KINDS}
    for module in filter(None, (name.strip() for name in plugins.split(","))):
        kind = importlib.import_module(module).KIND
        found[kind.name] = kind
    return found


def kind_of(name: str) -> TargetKind:
    """The kind called `name`; ValueError naming the known ones otherwise."""
    known = kinds()
    if name not in known:
        raise ValueError(f"unknown target kind {name!r} (expected {_expected(known)})")
    return known[name]


def text_pattern() -> str:
    """A regular expression of exactly the short forms `Target.parse` accepts (`cpu`,
    `cuda:sm_90`, surrounding blanks included), for API documents."""
    forms = [f"{_literal(kind.name)}(?::(?:{_variants(kind)})?)?" for kind in kinds().values()]
    return rf"^\s*(?:{'|'.join(forms)})\s*$"


def _variants(kind: TargetKind) -> str:
    """A regular expression of the variants of `kind` (its features optional, in order)."""
    if kind.choices:
        base = "|".join(_literal(choice) for choice in kind.choices)
    else:
        base = kind.pattern or "[^:+]*"
    features = "".join(f"(?:\\+{_literal(f)})?" for f in kind.features)
    return f"(?:{base}){features}" if features else base


def _object_schema(schema: dict[str, Any]) -> None:
    """The JSON Schema of `Target` says which variants each kind takes (one `oneOf` branch
    per kind, read when the schema is made, so plugin kinds are in it)."""
    schema["properties"]["kind"]["enum"] = [*kinds()]
    branches = []
    for kind in kinds().values():
        other = "isa" if kind.field == "arch" else "arch"
        variant = {"type": "string", "pattern": f"^(?:{_variants(kind)})$"}
        properties = {
            "kind": {"const": kind.name},
            kind.field: {"anyOf": [variant, {"type": "null"}]},
            other: {"type": "null"},
        }
        branches.append({"properties": properties, "required": ["kind"]})
    schema["oneOf"] = branches


def _literal(text: str) -> str:
    """`text` as a regular expression that both Python and JavaScript read alike (`re.escape`
    escapes `-`, which JavaScript's unicode mode refuses)."""
    return re.sub(r"([.^$*+?()\[\]{}|\\/])", r"\\\1", text)


def _expected(known: dict[str, TargetKind]) -> str:
    return " or ".join(f"{k.name}[:{k.field.upper()}]" for k in known.values())


class Target(BaseModel):
    """`{"kind": "cuda", "arch": "sm_90"}` or `{"kind": "cpu", "isa": "x86_64-avx512"}`.

    `arch`/`isa` may be left out in a request, meaning "whatever the workers of that kind have";
    every stored record names a complete target.
    """

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra=_object_schema,
    )

    kind: str = Field(description="a registered target kind")
    arch: str | None = None
    isa: str | None = None

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> Target:
        kind = kind_of(self.kind)
        other = "isa" if kind.field == "arch" else "arch"
        article = "an" if kind.field[0] in "aeiou" else "a"
        if getattr(self, other) is not None:
            raise ValueError(f"a {kind.name} target has {article} {kind.field}, not an {other}")
        if self.detail is not None:
            kind.check(self.detail)
        return self

    @classmethod
    def parse(cls, text: str) -> Target:
        """Parse the short form used on the command line and in queries: `cpu`,
        `cpu:x86_64-avx512`, `cuda`, `cuda:sm_90`."""
        name, _, detail = text.strip().partition(":")
        known = kinds()
        if name not in known:
            raise ValueError(f"unknown target {text!r} (expected {_expected(known)})")
        return cls(kind=name, **{known[name].field: detail or None})

    @property
    def detail(self) -> str | None:
        """The variant: the arch of a CUDA target, the ISA of a CPU target."""
        return self.arch if self.arch is not None else self.isa

    @property
    def base(self) -> str | None:
        """The variant without its features (`x86_64-avx512` of `x86_64-avx512+avx512_bf16`)."""
        return None if self.detail is None else self.spec.split(self.detail)[0]

    @property
    def features(self) -> tuple[str, ...]:
        """The features the variant names (none for a kind without them, or an incomplete
        target)."""
        return () if self.detail is None else self.spec.split(self.detail)[1]

    @property
    def complete(self) -> bool:
        return self.detail is not None

    @property
    def spec(self) -> TargetKind:
        return kind_of(self.kind)

    def with_detail(self, detail: str) -> Target:
        """This target with its variant named."""
        return Target(kind=self.kind, **{self.spec.field: detail})

    def __str__(self) -> str:
        return f"{self.kind}:{self.detail}" if self.detail else self.kind
