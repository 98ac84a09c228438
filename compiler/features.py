"""Cost-model features of a candidate: what the program computes, and how the config runs it.

`extract(program, target, config)` returns a flat dict with the same keys (`feature_names()`)
for every program and config of a `FEATURE_VERSION`, so records of different workloads train
one model. Three groups:

* **workload**: FLOPs, bytes moved, their ratio, stage classes, the log-extents of the
  heaviest stage's axes, the dtypes read and written;
* **schedule**, read off the lowered loop IR (so every schedule, present or future, is
  described the same way): the hot statement (the store or accumulation executed most), its
  loop depth and innermost loop (kind, factor, extent), the parallel extent above it, the
  bytes its loops touch at each of the four innermost levels (a working-set estimate: per read,
  the product of the inner extents its indices depend on) and the FLOPs per byte at those
  levels, explicit vector lanes, register-tile and workspace bytes, and row-group fusion;
  and the **microkernel**, the loop whose own body (nested loops aside) does the most vector
  arithmetic (a GEMM's k loop around its register tile): its vector FMAs, vector loads,
  broadcasts and prefetches, FMAs per value loaded, and unroll factor. On measured CPU spaces
  the register tile's shape is what separates the fastest configs, and the hot-statement
  features do not see it (version 2). A target's own statements count by their
  `kernel_work` (a CPU dot instruction summing two or four products per lane counts as that
  many FMAs, its broadcast word as a broadcast), which leaves every other kernel's values
  as they were;
* **GPU** (CUDA targets; 0 on CPUs, constant columns a tree model never splits on), of the
  *main kernel*, the launch that runs the hot statement (`targets.cuda.launches`): kernels
  launched, threads per block, blocks in the grid, waves (blocks over the SMs times the blocks
  one SM holds), shared memory per block (static and dynamic), `cp.async` pipeline stages,
  tensor-core (WMMA) use, a register estimate per thread (every per-thread local value and
  WMMA fragment, plus a fixed overhead) and the occupancy it allows (resident warps per SM over
  the arch's maximum, `targets.gpu.limits.residency`); and the **ptxas** columns, over
  every kernel: registers, spill bytes (stores and loads), stack frame and static shared
  memory. `extract` fills those with the estimates (0 spills, 0 stack), so the search can
  score configs it has not built; `with_build_stats` replaces them with what ptxas reported,
  so every built record carries the real values (version 3).

Extents are evaluated with symbols bound, loop variables at 0 and integer locals at their
initial values (a GEMM's clipped block sizes `min(mc, M - i * mc)` count as full blocks).

Values are log2(1 + x) for quantities that span orders of magnitude. Symbol values default
to each symbol's maximum; pass the values being tuned for. Deterministic and cheap: it lowers
to loop IR but renders and compiles nothing. The SM count behind waves is a reference GPU's
per arch (`targets.cuda.limits`), not the worker's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tunehub.compiler import dtypes
from tunehub.compiler.analysis import KINDS, Stage
from tunehub.compiler.backend import compiler_backend
from tunehub.compiler.ir import (
    Binary,
    Call,
    Cast,
    Compute,
    Const,
    Expr,
    Load,
    Program,
    Tensor,
    Unary,
    Var,
    loads,
    walk,
)
from tunehub.compiler.loop import (
    Assign,
    Decl,
    For,
    Function,
    If,
    Prefetch,
    Seq,
    Stmt,
    Store,
    as_expr,
    exprs,
    lanes,
    scalar,
    stmts,
)
from tunehub.compiler.lower import lower_function
from tunehub.compiler.space import space_for
from tunehub.compiler.space.program import group_knob
from tunehub.compiler.space.space import Config
from tunehub.schemas.target import Target

FEATURE_VERSION = 3
LEVELS = 4
MAX_AXES = 4
MAX_REDUCE_AXES = 3
_LOOP_KINDS = ("serial", "parallel", "unroll", "vectorize")
_KERNEL = ("vector_fmas", "vector_loads", "broadcasts", "prefetches", "fmas_per_load", "unroll")
_GPU = (
    "kernels",
    "threads",
    "log_blocks",
    "waves",
    "shared_bytes",
    "async_stages",
    "tensor_cores",
    "registers",
    "occupancy",
)
_PTXAS = ("registers", "spill_bytes", "stack_bytes", "shared_bytes")
# The columns a target's compiler facet estimates from the loop IR (`device_features`; 0 where
# a target has none) and a build may correct (`with_build_stats`).
DEVICE_FEATURES = tuple(f"gpu_{name}" for name in _GPU) + tuple(f"ptxas_{name}" for name in _PTXAS)


def feature_names() -> list[str]:
    """The keys of every `extract` result of this `FEATURE_VERSION`, in a fixed order."""
    names = ["log_flops", "log_bytes", "intensity", "stages", "symbols", "log_outputs"]
    names += [f"stages_{kind}" for kind in KINDS]
    names += [f"log_extent_{n}" for n in range(MAX_AXES)]
    names += [f"log_reduce_extent_{n}" for n in range(MAX_REDUCE_AXES)]
    names += [f"in_{d}" for d in dtypes.ALL] + [f"out_{d}" for d in dtypes.ALL]
    names += ["hot_log_iterations", "hot_depth", "hot_inner_log_extent", "hot_inner_factor"]
    names += [f"hot_inner_{kind}" for kind in _LOOP_KINDS]
    names += ["parallel_log_extent", "parallel_reduction", "loops", "vector_lanes"]
    names += ["log_local_bytes", "log_workspace_bytes", "fused_groups"]
    names += [f"log_touched_{n}" for n in range(1, LEVELS + 1)]
    names += [f"flops_per_byte_{n}" for n in range(1, LEVELS + 1)]
    names += [f"kernel_{name}" for name in _KERNEL]
    return names + list(DEVICE_FEATURES)


def extract(
    program: Program,
    target: Target,
    config: Config,
    symbols: Mapping[str, int] | None = None,
) -> dict[str, float]:
    """The feature vector of `config` on `program` (InvalidConfig if it is not valid)."""
    values = dict(symbols) if symbols is not None else {s.name: s.max for s in program.symbols}
    space = space_for(program, target)
    fn = lower_function(program, target, config, space)
    features = _workload(program, space.analysis.stages, values)
    bound = _with_locals(fn, values)
    features.update(_schedule(fn, bound))
    features.update(dict.fromkeys(DEVICE_FEATURES, 0.0))
    features.update(compiler_backend(target).device_features(fn, target, bound))
    features["fused_groups"] = float(
        sum(bool(config[group_knob(n)]) for n in range(len(space.analysis.groups)))
    )
    return {name: features[name] for name in feature_names()}


def with_build_stats(vector: Mapping[str, float], stats: Mapping[str, Any]) -> dict[str, float]:
    """`vector` with its ptxas columns set from a build's stats (`stats["kernels"]`, as
    `targets.cuda.build.parse_ptxas` gives them): the most registers, stack and static shared
    memory of any kernel, and the spill bytes of all. Unchanged where there are none (CPU)."""
    kernels = list(stats.get("kernels", {}).values())
    if not kernels:
        return dict(vector)
    spills = sum(k.get("spill_store_bytes", 0) + k.get("spill_load_bytes", 0) for k in kernels)
    return {
        **vector,
        "ptxas_registers": float(max(k.get("registers", 0) for k in kernels)),
        "ptxas_spill_bytes": float(spills),
        "ptxas_stack_bytes": float(max(k.get("stack_bytes", 0) for k in kernels)),
        "ptxas_shared_bytes": float(max(k.get("shared_bytes", 0) for k in kernels)),
    }


def log_scale(x: float) -> float:
    return math.log2(1.0 + max(x, 0.0))


# ----------------------------------------------------------------------------- workload


def _workload(
    program: Program, stages: tuple[Stage, ...], symbols: dict[str, int]
) -> dict[str, float]:
    def size(extent: int | str) -> int:
        return program.extent(extent, symbols)

    flops = []
    for stage in stages:
        points = math.prod(size(e) for e in stage.shape)
        reduce = math.prod(size(r.extent) for r in stage.anchor.reduce_axes)
        body = _ops(stage.anchor.body) + (1 if stage.anchor.reduce_op else 0)
        tail = sum(_ops(c.body) for c in stage.epilogue)
        flops.append(points * (reduce * body + tail))
    tensors: list[Tensor | Compute] = [*program.inputs, *map(program.compute, program.outputs)]
    moved = sum(math.prod(size(e) for e in t.shape) * dtypes.itemsize(t.dtype) for t in tensors)
    heavy = stages[max(range(len(stages)), key=lambda n: flops[n])]
    features = {
        "log_flops": log_scale(sum(flops)),
        "log_bytes": log_scale(moved),
        "intensity": sum(flops) / max(moved, 1),
        "stages": float(len(stages)),
        "symbols": float(len(program.symbols)),
        "log_outputs": log_scale(sum(math.prod(size(e) for e in s.shape) for s in stages)),
    }
    features.update({f"stages_{k}": float(sum(s.kind == k for s in stages)) for k in KINDS})
    spatial = _padded([size(e) for e in heavy.shape], MAX_AXES)
    features.update({f"log_extent_{n}": log_scale(e) for n, e in enumerate(spatial)})
    reduced = _padded([size(r.extent) for r in heavy.anchor.reduce_axes], MAX_REDUCE_AXES)
    features.update({f"log_reduce_extent_{n}": log_scale(e) for n, e in enumerate(reduced)})
    read = {t.dtype for t in program.inputs}
    written = {program.compute(n).dtype for n in program.outputs}
    features.update({f"in_{d}": float(d in read) for d in dtypes.ALL})
    features.update({f"out_{d}": float(d in written) for d in dtypes.ALL})
    return features


def _padded(extents: list[int], count: int) -> list[int]:
    """The last `count` extents, padded with ones in front (innermost axes line up)."""
    return [1] * max(0, count - len(extents)) + extents[-count:]


def _ops(expr: Expr) -> int:
    """Arithmetic operations in an expression (a call counts as one)."""
    return sum(isinstance(e, Binary | Unary | Call) for e in walk(expr))


# ----------------------------------------------------------------------------- schedule


@dataclass(frozen=True)
class Site:
    """A statement doing work, with the loops around it (outermost first)."""

    stmt: Store | Assign
    loops: tuple[For, ...]


def work_sites(stmt: Stmt, loops: tuple[For, ...] = ()) -> list[Site]:
    if isinstance(stmt, Store | Assign):
        return [Site(stmt, loops)]
    if isinstance(stmt, For):
        return work_sites(stmt.body, (*loops, stmt))
    if isinstance(stmt, Seq):
        return [site for child in stmt.body for site in work_sites(child, loops)]
    if isinstance(stmt, If):
        found = work_sites(stmt.then, loops)
        return found + (work_sites(stmt.orelse, loops) if stmt.orelse is not None else [])
    return []


def _with_locals(fn: Function, symbols: dict[str, int]) -> dict[str, int]:
    """`symbols` and the function's integer locals at their initial values."""
    bound = dict(symbols)
    for decl in stmts(fn.body):  # statement order: an initializer sees the locals before it
        if isinstance(decl, Decl) and decl.init is not None and dtypes.is_int(decl.dtype):
            bound[decl.name] = index_value(decl.init, bound)
    return bound


def _schedule(fn: Function, symbols: dict[str, int]) -> dict[str, float]:
    """The loop-IR features; `symbols` binds the integer locals too (`_with_locals`)."""
    sites = work_sites(fn.body)
    every = list(stmts(fn.body))
    all_loops = [s for s in every if isinstance(s, For)]
    # Every statement's expression nodes, walked once (the microkernel and the lanes read them).
    nodes = {id(s): [e for root in exprs(s) for e in walk(root)] for s in every}
    extents: dict[int, int] = {}

    def extent(loop: For) -> int:
        if id(loop) not in extents:
            extents[id(loop)] = max(1, index_value(loop.extent, symbols))
        return extents[id(loop)]

    def iterations(site: Site) -> int:
        return math.prod(extent(lp) for lp in site.loops)

    hot = max(sites, key=iterations)
    inner = hot.loops[-1] if hot.loops else None
    parallel = [lp for lp in hot.loops if lp.kind == "parallel"]
    features = {
        "hot_log_iterations": log_scale(iterations(hot)),
        "hot_depth": float(len(hot.loops)),
        "hot_inner_log_extent": log_scale(extent(inner)) if inner else 0.0,
        "hot_inner_factor": float(inner.factor) if inner else 0.0,
        "parallel_log_extent": log_scale(math.prod(extent(lp) for lp in parallel))
        if parallel
        else 0,
        "parallel_reduction": float(any(lp.reduction for lp in parallel)),
        "loops": float(len(all_loops)),
    }
    features.update(
        {f"hot_inner_{k}": float(inner is not None and inner.kind == k) for k in _LOOP_KINDS}
    )
    widest = (lanes(e.dtype) for found in nodes.values() for e in found)
    features["vector_lanes"] = float(max(widest, default=1))
    decls = [s for s in every if isinstance(s, Decl) and s.shape]
    local = sum(
        math.prod(d.shape) * dtypes.itemsize(scalar(d.dtype)) * lanes(d.dtype) for d in decls
    )
    features["log_local_bytes"] = log_scale(local)
    workspace = sum(
        math.prod(max(1, index_value(as_expr(e), symbols)) for e in ws.shape)
        * dtypes.itemsize(ws.dtype)
        for ws in fn.workspaces
    )
    features["log_workspace_bytes"] = log_scale(workspace)
    features.update(_levels(fn, hot, extent))
    features.update(_kernel(all_loops, nodes))
    return features


def _own_body(stmt: Stmt) -> list[Stmt]:
    """The statements a loop body runs itself, through `Seq` and `If` but not nested loops."""
    if isinstance(stmt, Seq):
        return [s for child in stmt.body for s in _own_body(child)]
    if isinstance(stmt, If):
        return _own_body(stmt.then) + (_own_body(stmt.orelse) if stmt.orelse else [])
    return [] if isinstance(stmt, For) else [stmt]


def _kernel(loops: list[For], nodes: Mapping[int, list[Expr]]) -> dict[str, float]:
    """The microkernel's features (see the module doc); zeros where nothing is vectorized.
    `nodes`: each statement's expression nodes, by the statement's id."""
    best: tuple[int, dict[str, float]] = (0, {f"kernel_{name}": 0.0 for name in _KERNEL})
    for loop in loops:
        body = _own_body(loop.body)
        found = [e for s in body for e in nodes[id(s)]]
        # A target's own statements (a CPU's dot instruction) say what vector work they do.
        own: dict[str, int] = {}
        for s in body:
            for name, count in getattr(s, "kernel_work", {}).items():
                own[name] = own.get(name, 0) + count
        fmas = sum(isinstance(e, Call) and e.fn == "fma" and lanes(e.dtype) > 1 for e in found)
        fmas += own.get("vector_fmas", 0)
        work = fmas + sum(isinstance(e, Binary) and lanes(e.dtype) > 1 for e in found)
        if work <= best[0]:
            continue
        loaded = sum(isinstance(e, Load) and lanes(e.dtype) > 1 for e in found)
        loaded += own.get("vector_loads", 0)
        broadcasts = sum(
            isinstance(e, Cast) and lanes(e.dtype) > 1 and lanes(e.x.dtype) == 1 for e in found
        )
        broadcasts += own.get("broadcasts", 0)
        values = (
            fmas,
            loaded,
            broadcasts,
            sum(isinstance(s, Prefetch) for s in body),
            fmas / max(1, loaded + broadcasts),
            loop.factor if loop.kind == "unroll" else 1,
        )
        best = (work, {f"kernel_{n}": float(v) for n, v in zip(_KERNEL, values, strict=True)})
    return best[1]


def _levels(fn: Function, hot: Site, extent: Callable[[For], int]) -> dict[str, float]:
    """Bytes the hot statement's innermost 1..LEVELS loops touch, and FLOPs per byte."""
    values = [hot.stmt.value, *(hot.stmt.indices if isinstance(hot.stmt, Store) else ())]
    reads = [ld for v in values for ld in loads(v)]
    ops = max(1, sum(_ops(v) for v in values))
    features = {}
    for level in range(1, LEVELS + 1):
        inner = hot.loops[-level:] if level <= len(hot.loops) else hot.loops
        touched = 0
        for ld in reads:
            used = {e.name for i in ld.indices for e in walk(i) if isinstance(e, Var)}
            elements = math.prod(extent(lp) for lp in inner if lp.var in used)
            buf = fn.buffer(ld.tensor)
            size = dtypes.itemsize(scalar(buf.dtype if buf else ld.dtype)) * lanes(ld.dtype)
            touched += elements * size
        work = ops * math.prod(extent(lp) for lp in inner)
        features[f"log_touched_{level}"] = log_scale(touched)
        features[f"flops_per_byte_{level}"] = work / max(touched, 1)
    return features


def index_value(expr: Expr, symbols: Mapping[str, int]) -> int:
    """An index expression's value with symbols bound and loop variables at 0 (so a clipped
    tail `min(T, N - o * T)` counts as a full tile)."""
    if isinstance(expr, Const):
        return int(expr.value)
    if isinstance(expr, Var):
        return symbols.get(expr.name, 0)
    if isinstance(expr, Binary):
        a, b = index_value(expr.a, symbols), index_value(expr.b, symbols)
        ops = {"+": a + b, "-": a - b, "*": a * b}
        if expr.op in ops:
            return ops[expr.op]
        if expr.op in ("//", "%") and b:
            return a // b if expr.op == "//" else a % b
        return 0
    if isinstance(expr, Call) and expr.fn in ("min", "max"):
        args = [index_value(a, symbols) for a in expr.args]
        return min(args) if expr.fn == "min" else max(args)
    return 0
