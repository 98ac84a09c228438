"""The dashboard's templates and static files, shipped inside the package (no CDN: the
pages work offline)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, StrictUndefined

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"


@cache
def templates() -> Jinja2Templates:
    """Every value is escaped (autoescape), and a name a template misspells is an error
    rather than an empty string (StrictUndefined)."""
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"), autoescape=True, undefined=StrictUndefined
    )
    return Jinja2Templates(env=env)
