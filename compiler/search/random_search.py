"""Uniform random search: the baseline every other strategy has to beat."""

from __future__ import annotations

from tunehub.compiler.search.strategy import SearchStrategy
from tunehub.compiler.space.space import Config


class RandomSearch(SearchStrategy):
    """Valid configs drawn uniformly from the space, ignoring every result."""

    def propose(self, n: int) -> list[Config]:
        return self.random_configs(n)
