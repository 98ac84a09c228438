"""Search strategies over schedule spaces, created by name (`create("evolutionary", ...)`)."""

from __future__ import annotations

from collections.abc import Iterable

from compiler.search.evolutionary import EvolutionarySearch
from compiler.search.random_search import RandomSearch
from compiler.search.strategy import Result, SearchStrategy
from compiler.space.space import Space

STRATEGIES: dict[str, type[SearchStrategy]] = {
    "random": RandomSearch,
    "evolutionary": EvolutionarySearch,
}


def create(
    name: str, space: Space, *, seed: int = 0, known: Iterable[Result] = ()
) -> SearchStrategy:
    """The strategy called `name` over `space`, seeded with the results already `known`."""
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(
            f"unknown search strategy {name!r} (one of {', '.join(STRATEGIES)})"
        ) from None
    return cls(space, seed=seed, known=known)


__all__ = ["STRATEGIES", "EvolutionarySearch", "RandomSearch", "Result", "SearchStrategy", "create"]
