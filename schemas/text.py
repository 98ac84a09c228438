"""Text a client sends that the database stores: refused at the boundary if it holds control
characters, so that SQLite and PostgreSQL behave alike.

PostgreSQL cannot store NUL in a text or JSONB value at all (the request would fail deep in
the driver), and SQLite stores it silently; other control characters (C0, DEL, C1) and the
invisible format characters that reorder or hide text (bidirectional overrides and isolates,
the byte-order mark) make a name that displays as another. A `Label` (a name, a device, a
target) may hold none of them; `FreeText` (an expression, an error log, a source) may hold
tabs and line breaks; `JsonObject` holds `FreeText` values under `Label` keys at any depth.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

# C0 controls, DEL, C1 controls; and the format characters that reorder or hide text.
# Written as escapes, so that the JSON Schema's pattern (`_Documented`) shows them as such.
_HIDDEN = r"\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
_LABEL_REFUSED = re.compile(rf"[\x00-\x1f\x7f-\x9f{_HIDDEN}]")
_FREE_TEXT_REFUSED = re.compile(rf"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_HIDDEN}]")


def _refuse(pattern: re.Pattern[str], text: str, allowed: str) -> str:
    found = pattern.search(text)
    if found is not None:
        raise ValueError(
            f"U+{ord(found[0]):04X} at position {found.start()}: {allowed} may not hold control "
            "or invisible format characters"
        )
    return text


def label(text: str) -> str:
    """`text` if it holds no control or format character at all (see the module)."""
    return _refuse(_LABEL_REFUSED, text, "a name")


def free_text(text: str) -> str:
    """`text` if it holds no control or format character but tabs and line breaks."""
    return _refuse(_FREE_TEXT_REFUSED, text, "text")


def json_text(value: Any) -> Any:
    """`value` (decoded JSON) if its keys are labels and its strings free text, at any depth."""
    if isinstance(value, str):
        free_text(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            label(key)
            json_text(item)
    elif isinstance(value, list):
        for item in value:
            json_text(item)
    return value


class _Documented:
    """Gives a string's JSON Schema the pattern of what it may hold (unless the field has a
    pattern of its own, stricter), so that the API's document allows only what is accepted."""

    def __init__(self, refused: re.Pattern[str]) -> None:
        # `[...]` negated: the same class, in an expression JavaScript reads alike.
        self.pattern = f"^[^{refused.pattern[1:-1]}]*$"

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        found = handler(schema)
        found.setdefault("pattern", self.pattern)
        return found


Label = Annotated[str, AfterValidator(label), _Documented(_LABEL_REFUSED)]
# A label as a mapping's key: its schema stays `additionalProperties` (a key pattern would
# make it `patternProperties`, which lets every other key hold anything).
LabelKey = Annotated[str, AfterValidator(label)]
FreeText = Annotated[str, AfterValidator(free_text), _Documented(_FREE_TEXT_REFUSED)]
JsonObject = Annotated[dict[str, Any], AfterValidator(json_text)]
