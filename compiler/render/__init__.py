"""Renderers: loop IR (`compiler.loop.Function`) to source text, one dialect per language."""

from compiler.loop import Function
from compiler.render.c import CRenderer
from compiler.render.cstyle import CStyleRenderer
from compiler.render.cuda import CUDARenderer

RENDERERS: dict[str, type[CStyleRenderer]] = {"c": CRenderer, "cuda": CUDARenderer}


def render(fn: Function, language: str = "c") -> str:
    """Source text of `fn` in `language`."""
    return RENDERERS[language]().render(fn)


__all__ = ["RENDERERS", "CRenderer", "CStyleRenderer", "CUDARenderer", "render"]
