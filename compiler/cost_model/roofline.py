"""A zero-data cost estimate: a roofline time read off a candidate's feature vector.

A learned model knows nothing until a workload has records, so without other workloads'
records the first batches of a search would be drawn blind. This estimate needs no records:
it is the larger of a compute time and a memory time, in cycles of an idealized core
(Williams et al.'s roofline, with the per-level traffic of Ansor's features).

* **compute**: the hot statement's dynamic count (each execution one, possibly vector,
  operation; vectorizing and register tiling divide it), over the FMA ports, slowed when the
  microkernel issues more vector loads and broadcasts per FMA than the load ports absorb;
* **memory**: per loop level, the bytes the hot statement's inner loops re-read per run of
  the level above (its dynamic count over the FLOPs per byte at that level), over the
  bandwidth of the cache that holds the level above's working set (L1, L2, L3, DRAM).

The ports, bandwidths and cache sizes are a generic x86 core's, not a measured machine's:
the estimate only has to order one workload's configs, and only until measurements exist.
"""

from __future__ import annotations

import numpy as np

from tunehub.compiler.cost_model.cost_model import Features
from tunehub.compiler.features import LEVELS, feature_names

FMA_PORTS = 2
LOAD_PORTS = 2
# (working-set bytes it holds, bytes per cycle it delivers), innermost cache first.
CACHES = ((32 << 10, 64.0), (1 << 20, 32.0), (32 << 20, 16.0))
DRAM_BYTES_PER_CYCLE = 8.0


def estimate(features: Features) -> np.ndarray:
    """Per row of `compiler.features` vectors, -log2 of the roofline cycles: higher = faster,
    comparable between configs of one workload only."""
    x = np.asarray(features, dtype=np.float64)
    names = feature_names()
    if x.ndim != 2 or x.shape[1] != len(names):
        raise ValueError(f"expected rows of the {len(names)} compiler features")
    column = {name: x[:, n] for n, name in enumerate(names)}
    executions = np.exp2(column["hot_log_iterations"])
    fmas = column["kernel_vector_fmas"]
    loads = column["kernel_vector_loads"] + column["kernel_broadcasts"]
    # Cycles per FMA cycle: above 1 when the load ports, not the FMA ports, set the pace.
    issue = np.where(fmas > 0, (loads / LOAD_PORTS) / np.maximum(fmas / FMA_PORTS, 1e-9), 1.0)
    compute = executions / FMA_PORTS * np.maximum(issue, 1.0)
    memory = np.zeros(len(x))
    for level in range(1, LEVELS + 1):
        traffic = executions / np.maximum(column[f"flops_per_byte_{level}"], 1e-9)
        # The level above's working set (the outermost level's is unknown: memory).
        outer = np.exp2(column[f"log_touched_{level + 1}"]) if level < LEVELS else np.inf
        memory = np.maximum(memory, traffic / _bandwidth(np.broadcast_to(outer, traffic.shape)))
    return -np.log2(np.maximum(compute, memory))


def _bandwidth(working_set: np.ndarray) -> np.ndarray:
    """Bytes per cycle from the innermost cache that holds `working_set` (DRAM if none)."""
    out = np.full(working_set.shape, DRAM_BYTES_PER_CYCLE)
    for size, rate in reversed(CACHES):
        out = np.where(working_set <= size, rate, out)
    return out
