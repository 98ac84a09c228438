"""Many tasks, one budget: which task's next batch cuts the weighted total latency most.

A pure policy over per-task histories (no I/O): the tuner asks `next_task()`, runs one batch of
`batch_for(task)` trials of that task, and tells the scheduler what happened with `record()`.
It follows the gradient task scheduler of MetaSchedule / Ansor:

- **Warm-up**: every task gets one batch first, in order (the tuner's first batch of a task
  measures its naive config plus proposals), so each has a best latency to reason about.
- **Gradient**: after that, a task's expected latency drop per batch is
  `alpha * backward + (1 - alpha) * forward`, where `backward` is the best-latency drop per
  batch over the last `window` batches and `forward` the optimistic `best / batches` (what
  one more batch would give if it improved as much as the average batch so far). The task
  with the largest `weight * drop` gets the batch (`weight` = how many times the model runs
  the task, so the target is the weighted total latency); ties go to the task with fewer
  trials. With probability `epsilon` a random active task gets it instead (exploration).
- **Early stopping**: a task stops when its best latency has not improved by more than
  `tolerance` (relative) over its last `patience` batches, or when its space is exhausted (a
  batch came back smaller than asked); a cancelled task is reported as exhausted. When every
  task has stopped, the rest of the budget is left unspent.

A task whose best latency is still unknown (no correct run) has no gradient (drop 0): it only
gets batches through exploration or ties, and stops after `patience` batches like a flat task.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

ALPHA = 0.2  # MetaSchedule's default weight of the backward gradient
WINDOW = 3  # batches the backward gradient looks back over
PATIENCE = 3  # batches without improvement before a task stops
EPSILON = 0.05  # chance of giving a batch to a random active task
TOLERANCE = 0.01  # a relative drop of the best latency below this is noise, not improvement


@dataclass
class TaskHistory:
    """What the scheduler knows about one task."""

    weight: float
    trials: int = 0
    best: list[float | None] = field(default_factory=list)  # best latency after each batch
    exhausted: bool = False

    @property
    def batches(self) -> int:
        return len(self.best)


class TaskScheduler:
    """Allocates `total_trials` in batches of at most `batch_size` across weighted tasks."""

    def __init__(
        self,
        weights: Sequence[float],
        *,
        total_trials: int,
        batch_size: int,
        alpha: float = ALPHA,
        window: int = WINDOW,
        patience: int = PATIENCE,
        epsilon: float = EPSILON,
        tolerance: float = TOLERANCE,
        seed: int = 0,
    ) -> None:
        if not weights:
            raise ValueError("no tasks to schedule")
        if any(w <= 0 for w in weights):
            raise ValueError(f"task weights must be positive, not {list(weights)}")
        if total_trials < 1 or batch_size < 1:
            raise ValueError("total_trials and batch_size must be at least 1")
        self.tasks = [TaskHistory(float(w)) for w in weights]
        self.total_trials = total_trials
        self.batch_size = batch_size
        self.alpha = alpha
        self.window = max(1, window)
        self.patience = max(1, patience)
        self.epsilon = epsilon
        self.tolerance = tolerance
        self._rng = random.Random(seed)

    @property
    def spent(self) -> int:
        return sum(t.trials for t in self.tasks)

    @property
    def remaining(self) -> int:
        return self.total_trials - self.spent

    def active(self, task: int) -> bool:
        """Still worth a batch: not exhausted and not stopped early."""
        history = self.tasks[task]
        return not history.exhausted and not self.stopped(task)

    def stopped(self, task: int) -> bool:
        """No improvement beyond `tolerance` over the last `patience` batches."""
        best = self.tasks[task].best
        if len(best) <= self.patience:
            return False
        return not _improved(best[-1 - self.patience], best[-1], self.tolerance)

    def next_task(self) -> int | None:
        """The task to give the next batch to; None when the budget is spent or no task is
        active."""
        if self.remaining <= 0:
            return None
        active = [i for i in range(len(self.tasks)) if self.active(i)]
        if not active:
            return None
        for i in active:  # warm-up: one batch each, in order
            if self.tasks[i].batches == 0:
                return i
        if self._rng.random() < self.epsilon:
            return self._rng.choice(active)
        return max(active, key=lambda i: (self.gain(i), -self.tasks[i].trials, -i))

    def batch_for(self, task: int) -> int:
        """Trials of the next batch of `task`: a batch, or what is left of the budget. During
        warm-up the budget is shared with the tasks still waiting for their first batch, so a
        budget smaller than a batch per task still reaches every task (a dispatch table over
        several symbol values needs a kernel for each)."""
        if self.remaining <= 0:
            return 0
        share = self.remaining
        if self.tasks[task].batches == 0:
            waiting = sum(1 for i in range(len(self.tasks)) if self.tasks[i].batches == 0)
            share = max(1, self.remaining // waiting)
        return min(self.batch_size, share)

    def gain(self, task: int) -> float:
        """Expected drop of the weighted total latency (seconds) from one more batch."""
        history = self.tasks[task]
        best = history.best
        if not best or best[-1] is None:
            return 0.0
        now = best[-1]
        w = min(self.window, len(best) - 1)
        before = best[-1 - w] if w else None
        backward = (before - now) / w if before is not None and w else 0.0
        forward = now / len(best)
        return history.weight * (self.alpha * backward + (1 - self.alpha) * forward)

    def record(self, task: int, trials: int, best: float | None, *, exhausted: bool) -> None:
        """One batch of `task` ran `trials` trials; `best` is its best latency now (None while
        none ran correctly); `exhausted` when its space has nothing left (or it was
        cancelled)."""
        history = self.tasks[task]
        history.trials += trials
        previous = history.best[-1] if history.best else None
        if best is not None and previous is not None:
            best = min(best, previous)  # a best latency never gets worse
        history.best.append(best if best is not None else previous)
        history.exhausted = history.exhausted or exhausted

    def weighted_latency(self) -> float | None:
        """Weighted total of the tasks' best latencies now; None while a task has none."""
        total = 0.0
        for t in self.tasks:
            latest = t.best[-1] if t.best else None
            if latest is None:
                return None
            total += t.weight * latest
        return total


def _improved(before: float | None, now: float | None, tolerance: float) -> bool:
    if now is None:
        return False
    if before is None:
        return True
    return now < before * (1 - tolerance)
