"""The schedule-space interface: the knobs of one task on one target and their constraints."""

from __future__ import annotations

import json
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping

Knob = int | str | bool
Config = dict[str, Knob]

_MAX_DRAWS = 1000


class Space(ABC):
    """Every knob's candidate values, plus the constraints that rule combinations out.

    A config is a flat dict of knob values. `check` rejects invalid configs before any
    compiler sees them, so search strategies may propose freely.
    """

    knobs: dict[str, tuple[Knob, ...]]

    @abstractmethod
    def naive(self) -> Config:
        """The baseline: the loop nest as the compute is written (no tiling, no threads)."""

    @abstractmethod
    def default(self) -> Config:
        """A reasonable config without any search (used by `tunehub compile`)."""

    def seeds(self, symbols: Mapping[str, int] | None = None) -> list[Config]:
        """Valid configs to measure first, after the baseline: the known-good kernel shapes
        a search would find late (as Triton's autotuner lists its configs), for a tuning
        measured at `symbols` (a symbolic M of 1 wants GEMV shapes, of 2048 tensor-core
        tiles). None by default."""
        return []

    def check(self, config: Config) -> str | None:
        """Why `config` is invalid, or None. Subclasses add their constraints."""
        for name, value in config.items():
            if name not in self.knobs:
                return f"unknown knob {name!r}"
            if value not in self.knobs[name]:
                return f"knob {name!r} cannot be {value!r}"
        missing = set(self.knobs) - set(config)
        if missing:
            return f"missing knobs: {', '.join(sorted(missing))}"
        return None

    def canonical(self, config: Config) -> Config:
        """`config` with the knobs it leaves unused (e.g. those of another mode) at their
        first values, so that one kernel has one config; `check` rejects other forms."""
        return config

    def sample(self, rng: random.Random) -> Config:
        """A uniformly drawn valid config."""
        for _ in range(_MAX_DRAWS):
            config = {name: rng.choice(values) for name, values in self.knobs.items()}
            config = self.canonical(config)
            if self.check(config) is None:
                return config
        return self.default()

    def mutate(self, config: Config, rng: random.Random) -> Config:
        """A valid config that differs from `config` in one knob, and in the knobs that
        change makes unused (or `config` if none is)."""
        names = [n for n, values in self.knobs.items() if len(values) > 1]
        for _ in range(_MAX_DRAWS if names else 0):
            name = rng.choice(names)
            value = rng.choice([v for v in self.knobs[name] if v != config[name]])
            candidate = self.canonical({**config, name: value})
            if candidate != config and self.check(candidate) is None:
                return candidate
        return dict(config)

    @staticmethod
    def key(config: Config) -> str:
        """A canonical string for a config: equal configs, equal keys."""
        return json.dumps(config, sort_keys=True, separators=(",", ":"))
