"""The search-strategy interface: what the tuner asks of any strategy.

The lifecycle follows MetaSchedule's `SearchStrategy` with the plumbing left out: a strategy is
built over one space with everything already known about it (so re-tuning resumes instead of
re-measuring), then the tuner alternates `propose(n)` and `notify(results)` until its budget is
spent or `propose` comes back empty (the space is exhausted).

A strategy never proposes a config twice, nor one that was measured before it was built: a
measurement is the expensive part, and the database already holds every one ever made.
"""

from __future__ import annotations

import itertools
import math
import random
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator

from tunehub.compiler.space.space import Config, Space

# (config, latency in seconds), latency None when the candidate failed (any kind of failure).
Result = tuple[Config, float | None]

# Random draws allowed per config asked for before falling back to enumerating the space.
_DRAWS_PER_CONFIG = 32
# Spaces up to this many knob combinations may be enumerated to find the last unseen configs.
_ENUMERABLE = 200_000


class SearchStrategy(ABC):
    """Proposes configs of `space` to measure and learns from their results.

    `known` holds the results already in the database for this workload, target and symbols;
    they seed the strategy exactly as if they had been notified.
    """

    def __init__(self, space: Space, *, seed: int = 0, known: Iterable[Result] = ()) -> None:
        self.space = space
        self.rng = random.Random(seed)
        self._seen: set[str] = set()
        self._enumerated: Iterator[Config] | None = None
        # Successful measurements, kept sorted by latency (best first).
        self.measured: list[tuple[float, Config]] = []
        self.notify(list(known))

    @abstractmethod
    def propose(self, n: int) -> list[Config]:
        """Up to `n` valid configs never proposed or measured before; fewer (possibly none)
        only when the space has no unseen valid config left."""

    def notify(self, results: list[Result]) -> None:
        """Record measured results. Subclasses that keep a model extend this (and call it).

        Only configs valid in the space as it is now join `measured`: records made under an
        older version of a space may name knobs or values it no longer has.
        """
        for config, latency in results:
            self._seen.add(self.space.key(config))
            if latency is not None and self.space.check(config) is None:
                self.measured.append((latency, dict(config)))
        self.measured.sort(key=lambda item: item[0])

    def seen(self, config: Config) -> bool:
        return self.space.key(config) in self._seen

    def take(self, config: Config) -> bool:
        """Claim `config` for a proposal: True when it is valid and unseen (it is now seen)."""
        key = self.space.key(config)
        if key in self._seen or self.space.check(config) is not None:
            return False
        self._seen.add(key)
        return True

    def random_configs(self, n: int) -> list[Config]:
        """Up to `n` fresh valid configs drawn uniformly.

        Rejection sampling slows to a crawl once most of a small space is seen, so after a bounded
        number of draws the remaining configs come from a shuffled enumeration of the space
        (when it is small enough to enumerate at all).
        """
        out: list[Config] = []
        for _ in range(_DRAWS_PER_CONFIG * n):
            if len(out) == n:
                return out
            config = self.space.sample(self.rng)
            if self.take(config):
                out.append(config)
        for config in self._enumeration():
            if len(out) == n:
                break
            if self.take(config):
                out.append(config)
        return out

    def _enumeration(self) -> Iterator[Config]:
        """Every config of the space in a seeded random order (empty for huge spaces).

        One shared iterator: configs it has already yielded are seen, so it never restarts.
        """
        if self._enumerated is None:
            sizes = [len(values) for values in self.space.knobs.values()]
            if math.prod(sizes) > _ENUMERABLE:
                self._enumerated = iter(())
            else:
                names = list(self.space.knobs)
                combos = list(itertools.product(*self.space.knobs.values()))
                self.rng.shuffle(combos)
                self._enumerated = (dict(zip(names, combo, strict=True)) for combo in combos)
        return self._enumerated
