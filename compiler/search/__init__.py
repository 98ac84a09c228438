"""Search strategies over schedule spaces, created by name (`create("evolutionary", ...)`)."""

from __future__ import annotations

from collections.abc import Iterable

from tunehub.compiler.search.evolutionary import EvolutionarySearch
from tunehub.compiler.search.model_guided import Guide, ModelGuidedSearch, TrainingSet
from tunehub.compiler.search.random_search import RandomSearch
from tunehub.compiler.search.strategy import Result, SearchStrategy
from tunehub.compiler.space.space import Space
from tunehub.schemas.api import StrategyName

# Each strategy under its name in the wire format's one list of them (`schemas.api`).
STRATEGIES: dict[str, type[SearchStrategy]] = {
    StrategyName.MODEL: ModelGuidedSearch,
    StrategyName.RANDOM: RandomSearch,
    StrategyName.EVOLUTIONARY: EvolutionarySearch,
}


def guided(name: str) -> bool:
    """Whether strategy `name` takes a `Guide` (a cost model and what it trains on)."""
    return issubclass(STRATEGIES.get(name, SearchStrategy), ModelGuidedSearch)


def create(
    name: str,
    space: Space,
    *,
    seed: int = 0,
    known: Iterable[Result] = (),
    guide: Guide | None = None,
) -> SearchStrategy:
    """The strategy called `name` over `space`, seeded with the results already `known`.

    A model-guided strategy uses `guide` (default: knob-position features, a fresh XGBoost
    model, no other workloads' records); the others ignore it.
    """
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(
            f"unknown search strategy {name!r} (one of {', '.join(STRATEGIES)})"
        ) from None
    if issubclass(cls, ModelGuidedSearch):
        return cls(space, seed=seed, known=known, guide=guide)
    return cls(space, seed=seed, known=known)


__all__ = [
    "STRATEGIES",
    "EvolutionarySearch",
    "Guide",
    "ModelGuidedSearch",
    "RandomSearch",
    "Result",
    "SearchStrategy",
    "TrainingSet",
    "create",
    "guided",
]
