"""How well a model ranks the configs of one workload, on records it was not trained on.

* Kendall tau-b between the scores and the measured throughput: +1 is the exact order, 0 is
  no better than chance. Failures count as throughput 0 (ties with each other).
* top-k recall: the share of the k truly fastest configs found among the model's k best
  scored, i.e. what a search that measures the model's top k would catch.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def kendall_tau(scores: npt.ArrayLike, throughput: npt.ArrayLike) -> float:
    """Kendall's tau-b (ties in either sequence handled); 0 when either is constant."""
    s, t = np.asarray(scores, dtype=np.float64), np.asarray(throughput, dtype=np.float64)
    upper = np.triu_indices(len(s), k=1)
    ds = np.sign(s[:, None] - s[None, :])[upper]
    dt = np.sign(t[:, None] - t[None, :])[upper]
    denominator = np.sqrt(np.count_nonzero(ds) * np.count_nonzero(dt))
    return float(np.sum(ds * dt) / denominator) if denominator else 0.0


def top_k_recall(scores: npt.ArrayLike, throughput: npt.ArrayLike, k: int) -> float:
    """The share of the k highest-throughput records among the k highest-scored ones."""
    s, t = np.asarray(scores), np.asarray(throughput)
    k = min(k, len(s))
    if k == 0:
        return 0.0
    best = set(np.argsort(-t, kind="stable")[:k].tolist())
    picked = set(np.argsort(-s, kind="stable")[:k].tolist())
    return len(best & picked) / k
