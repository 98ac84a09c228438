"""Signature names from a model's names.

A model names its tensors as it likes (`/model/layers.0/Add_output_0`, `p_lin_weight`,
`lv397`); a signature's names are identifiers of at most 64 characters that do not shadow the
expression language. Names are for people only (the workload key ignores them), so a frontend
keeps as much of the model's name as it can and makes it unique within one signature.
"""

from __future__ import annotations

import re

from tunehub.compiler.parse import RESERVED

_MAX = 64
_NOT_WORD = re.compile(r"[^A-Za-z0-9_]+")
# Axes are named `i0..`, reduce axes `k0..` by the frontends: a tensor or symbol never is.
_AXIS_LIKE = re.compile(r"[ik][0-9]+")


class Names:
    """Unique identifiers within one signature, derived from the model's names."""

    def __init__(self) -> None:
        self._taken: set[str] = set()

    def take(self, text: str) -> str:
        """An identifier for `text`, unused so far in this signature, and now taken."""
        base = identifier(text)
        name, n = base, 1
        while name in self._taken:
            suffix = f"_{n}"
            name = base[: _MAX - len(suffix)] + suffix
            n += 1
        self._taken.add(name)
        return name

    def local(self, text: str) -> str:
        """An identifier for `text` that no tensor or symbol of the signature has taken, not
        itself taken: a compute's axes are local to it."""
        name = identifier(text)
        while name in self._taken:
            name = name[: _MAX - 1] + "_"
        return name


def identifier(text: str) -> str:
    """`text` as an identifier: runs of other characters become `_`, a long name keeps its
    end (`..._MatMul_output_0` says most), leading digits go, and a name the language reserves
    (or that looks like an axis) gets a `_` after it."""
    name = _NOT_WORD.sub("_", text)[-_MAX:].lstrip("_0123456789").rstrip("_") or "t"
    if name in RESERVED or _AXIS_LIKE.fullmatch(name):
        name = name[: _MAX - 1] + "_"
    return name
