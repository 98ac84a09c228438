"""Evolutionary search: breed the best measured configs, keep some random exploration.

Parents are drawn from the fastest measured configs with weight 1/rank², so the best breed
most (on synthetic objectives over the real spaces, 1/rank² found better configs than 1/rank).
A child is a knob-wise crossover of two parents (when the mix is valid) or a copy of one, then
mutated one knob at a time until it is new. A fraction of every batch is drawn uniformly at
random, so the search does not collapse onto the first good neighbourhood it finds. Before
anything has been measured successfully there is nothing to breed and the batch is all random.
"""

from __future__ import annotations

from tunehub.compiler.search.strategy import SearchStrategy
from tunehub.compiler.space.space import Config

_MAX_MUTATIONS = 4
_CROSSOVER_TRIES = 4


class EvolutionarySearch(SearchStrategy):
    population_size = 16
    explore = 0.25  # fraction of each batch drawn at random
    crossover_rate = 0.5

    def propose(self, n: int) -> list[Config]:
        if not self.measured:
            return self.random_configs(n)
        n_random = round(n * self.explore)
        children: list[Config] = []
        for _ in range(8 * (n - n_random)):
            if len(children) == n - n_random:
                break
            child = self._breed()
            if child is not None:
                children.append(child)
        return children + self.random_configs(n - len(children))

    def _breed(self) -> Config | None:
        """One new valid config bred from the population, or None if this attempt failed."""
        child = self._select()
        if len(self.measured) > 1 and self.rng.random() < self.crossover_rate:
            child = self._crossover(child, self._select())
        for _ in range(_MAX_MUTATIONS):
            if not self.seen(child):
                break
            child = self.space.mutate(child, self.rng)
        return child if self.take(child) else None

    def _select(self) -> Config:
        population = self.measured[: self.population_size]
        weights = [1.0 / (rank + 1) ** 2 for rank in range(len(population))]
        return self.rng.choices(population, weights=weights)[0][1]

    def _crossover(self, a: Config, b: Config) -> Config:
        """Each knob from either parent (those the mix leaves unused back at their first
        values); `a` itself when no valid mix turns up."""
        for _ in range(_CROSSOVER_TRIES):
            child = self.space.canonical({name: self.rng.choice((a[name], b[name])) for name in a})
            if self.space.check(child) is None:
                return child
        return a
