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
  features do not see it (version 2);
* **GPU** (CUDA targets; 0 on CPUs, constant columns a tree model never splits on), of the
  *main kernel*, the launch that runs the hot statement (`compiler.render.launch`): kernels
  launched, threads per block, blocks in the grid, waves (blocks over the SMs times the blocks
  one SM holds), shared memory per block (static and dynamic), `cp.async` pipeline stages,
  tensor-core (WMMA) use, a register estimate per thread (every per-thread local value and
  WMMA fragment, plus a fixed overhead) and the occupancy it allows (resident warps per SM over
  the arch's maximum, `compiler.space.limits.residency`); and the **ptxas** columns, over
  every kernel: registers, spill bytes (stores and loads), stack frame and static shared
  memory. `extract` fills those with the estimates (0 spills, 0 stack), so the search can
  score configs it has not built; `with_build_stats` replaces them with what ptxas reported,
  so every built record carries the real values (version 3).

Extents are evaluated with symbols bound, loop variables at 0 and integer locals at their
initial values (a GEMM's clipped block sizes `min(mc, M - i * mc)` count as full blocks).

Values are log2(1 + x) for quantities that span orders of magnitude. Symbol values default
to each symbol's maximum; pass the values being tuned for. Deterministic and cheap: it lowers
to loop IR but renders and compiles nothing. The SM count behind waves is a reference GPU's
per arch (`compiler.space.limits`), not the worker's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from compiler import dtypes
from compiler.analysis import KINDS, Stage
from compiler.dtypes import INDEX
from compiler.ir import (
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
from compiler.loop import (
    Assign,
    AsyncCopy,
    Decl,
    For,
    Function,
    If,
    Prefetch,
    Seq,
    Stmt,
    Store,
    Wgmma,
    Wmma,
    as_expr,
    exprs,
    lanes,
    scalar,
    stmts,
)
from compiler.lower import lower_function
from compiler.render.launch import Launch, launches
from compiler.space import space_for
from compiler.space.limits import WARP, limits_for, residency
from compiler.space.program import group_knob
from compiler.space.space import Config
from schemas.target import Target

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
# Registers a GPU thread needs besides its local values: indices, addresses and loop state
# (the schedules' estimates, fitted to ptxas on sm_80, use the same).
REGISTER_OVERHEAD = 24
# Per thread of a 16x16 WMMA fragment: an accumulator holds 8 floats; an operand, 16 packed
# halves, but ptxas loads operands just before their mma and reuses their registers (4 fits
# ptxas on sm_80 float16 matmuls within 15%).
FRAGMENT_REGISTERS = {"acc": 8, "a": 4, "b": 4}


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
    return names + _gpu_names()


def _gpu_names() -> list[str]:
    return [f"gpu_{name}" for name in _GPU] + [f"ptxas_{name}" for name in _PTXAS]


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
    if target.kind == "cuda":
        features.update(_gpu(fn, target, bound))
    else:
        features.update(dict.fromkeys(_gpu_names(), 0.0))
    features["fused_groups"] = float(
        sum(bool(config[group_knob(n)]) for n in range(len(space.analysis.groups)))
    )
    return {name: features[name] for name in feature_names()}


def with_build_stats(vector: Mapping[str, float], stats: Mapping[str, Any]) -> dict[str, float]:
    """`vector` with its ptxas columns set from a build's stats (`stats["kernels"]`, as
    `worker.build.cuda.parse_ptxas` gives them): the most registers, stack and static shared
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


def _log(x: float) -> float:
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
        "log_flops": _log(sum(flops)),
        "log_bytes": _log(moved),
        "intensity": sum(flops) / max(moved, 1),
        "stages": float(len(stages)),
        "symbols": float(len(program.symbols)),
        "log_outputs": _log(sum(math.prod(size(e) for e in s.shape) for s in stages)),
    }
    features.update({f"stages_{k}": float(sum(s.kind == k for s in stages)) for k in KINDS})
    spatial = _padded([size(e) for e in heavy.shape], MAX_AXES)
    features.update({f"log_extent_{n}": _log(e) for n, e in enumerate(spatial)})
    reduced = _padded([size(r.extent) for r in heavy.anchor.reduce_axes], MAX_REDUCE_AXES)
    features.update({f"log_reduce_extent_{n}": _log(e) for n, e in enumerate(reduced)})
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
class _Site:
    """A statement doing work, with the loops around it (outermost first)."""

    stmt: Store | Assign
    loops: tuple[For, ...]


def _sites(stmt: Stmt, loops: tuple[For, ...] = ()) -> list[_Site]:
    if isinstance(stmt, Store | Assign):
        return [_Site(stmt, loops)]
    if isinstance(stmt, For):
        return _sites(stmt.body, (*loops, stmt))
    if isinstance(stmt, Seq):
        return [site for child in stmt.body for site in _sites(child, loops)]
    if isinstance(stmt, If):
        found = _sites(stmt.then, loops)
        return found + (_sites(stmt.orelse, loops) if stmt.orelse is not None else [])
    return []


def _with_locals(fn: Function, symbols: dict[str, int]) -> dict[str, int]:
    """`symbols` and the function's integer locals at their initial values."""
    bound = dict(symbols)
    for decl in stmts(fn.body):  # statement order: an initializer sees the locals before it
        if isinstance(decl, Decl) and decl.init is not None and dtypes.is_int(decl.dtype):
            bound[decl.name] = _evaluate(decl.init, bound)
    return bound


def _schedule(fn: Function, symbols: dict[str, int]) -> dict[str, float]:
    """The loop-IR features; `symbols` binds the integer locals too (`_with_locals`)."""
    sites = _sites(fn.body)
    every = list(stmts(fn.body))
    all_loops = [s for s in every if isinstance(s, For)]

    def extent(loop: For) -> int:
        return max(1, _evaluate(loop.extent, symbols))

    def iterations(site: _Site) -> int:
        return math.prod(extent(lp) for lp in site.loops)

    hot = max(sites, key=iterations)
    inner = hot.loops[-1] if hot.loops else None
    parallel = [lp for lp in hot.loops if lp.kind == "parallel"]
    features = {
        "hot_log_iterations": _log(iterations(hot)),
        "hot_depth": float(len(hot.loops)),
        "hot_inner_log_extent": _log(extent(inner)) if inner else 0.0,
        "hot_inner_factor": float(inner.factor) if inner else 0.0,
        "parallel_log_extent": _log(math.prod(extent(lp) for lp in parallel)) if parallel else 0,
        "parallel_reduction": float(any(lp.reduction for lp in parallel)),
        "loops": float(len(all_loops)),
    }
    features.update(
        {f"hot_inner_{k}": float(inner is not None and inner.kind == k) for k in _LOOP_KINDS}
    )
    every_expr = [e for s in every for root in exprs(s) for e in walk(root)]
    features["vector_lanes"] = float(max((lanes(e.dtype) for e in every_expr), default=1))
    decls = [s for s in every if isinstance(s, Decl) and s.shape]
    local = sum(
        math.prod(d.shape) * dtypes.itemsize(scalar(d.dtype)) * lanes(d.dtype) for d in decls
    )
    features["log_local_bytes"] = _log(local)
    workspace = sum(
        math.prod(max(1, _evaluate(as_expr(e), symbols)) for e in ws.shape)
        * dtypes.itemsize(ws.dtype)
        for ws in fn.workspaces
    )
    features["log_workspace_bytes"] = _log(workspace)
    features.update(_levels(fn, hot, extent))
    features.update(_kernel(every))
    return features


def _own_body(stmt: Stmt) -> list[Stmt]:
    """The statements a loop body runs itself, through `Seq` and `If` but not nested loops."""
    if isinstance(stmt, Seq):
        return [s for child in stmt.body for s in _own_body(child)]
    if isinstance(stmt, If):
        return _own_body(stmt.then) + (_own_body(stmt.orelse) if stmt.orelse else [])
    return [] if isinstance(stmt, For) else [stmt]


def _kernel(every: list[Stmt]) -> dict[str, float]:
    """The microkernel's features (see the module doc); zeros where nothing is vectorized."""
    best: tuple[int, dict[str, float]] = (0, {f"kernel_{name}": 0.0 for name in _KERNEL})
    for loop in every:
        if not isinstance(loop, For):
            continue
        body = _own_body(loop.body)
        nodes = [e for s in body for root in exprs(s) for e in walk(root)]
        fmas = sum(isinstance(e, Call) and e.fn == "fma" and lanes(e.dtype) > 1 for e in nodes)
        work = fmas + sum(isinstance(e, Binary) and lanes(e.dtype) > 1 for e in nodes)
        if work <= best[0]:
            continue
        loaded = sum(isinstance(e, Load) and lanes(e.dtype) > 1 for e in nodes)
        broadcasts = sum(
            isinstance(e, Cast) and lanes(e.dtype) > 1 and lanes(e.x.dtype) == 1 for e in nodes
        )
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


def _levels(fn: Function, hot: _Site, extent: Callable[[For], int]) -> dict[str, float]:
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
        features[f"log_touched_{level}"] = _log(touched)
        features[f"flops_per_byte_{level}"] = work / max(touched, 1)
    return features


# ----------------------------------------------------------------------------- GPU


def _gpu(fn: Function, target: Target, symbols: dict[str, int]) -> dict[str, float]:
    """The GPU and (estimated) ptxas columns of a CUDA function (see the module doc)."""
    found = launches(fn)

    def work(launch: Launch) -> int:
        sites = _sites(launch.body)
        return max(
            (math.prod(max(1, _evaluate(lp.extent, symbols)) for lp in s.loops) for s in sites),
            default=0,
        )

    main = max(found, key=work)
    body = list(stmts(main.body))
    registers = _registers(main.body)
    blocks = math.prod(max(1, _evaluate(e, symbols)) for e in main.grid)
    resident = residency(target, main.threads, main.shared_bytes, registers)
    limits = limits_for(target)
    waits = [s.pending for s in body if isinstance(s, AsyncCopy) and s.op == "wait"]
    copies = any(isinstance(s, AsyncCopy) and s.op == "copy" for s in body)
    return {
        "gpu_kernels": float(len(found)),
        "gpu_threads": float(main.threads),
        "gpu_log_blocks": _log(blocks),
        "gpu_waves": blocks / (limits.sms * max(resident, 1)),
        "gpu_shared_bytes": float(main.shared_bytes),
        "gpu_async_stages": float(max(waits, default=0) + 2) if copies else 0.0,
        "gpu_tensor_cores": float(any(isinstance(s, Wmma | Wgmma) for s in body)),
        "gpu_registers": float(registers),
        "gpu_occupancy": resident * -(-main.threads // WARP) / limits.warps_per_sm,
        "ptxas_registers": float(max(_registers(k.body) for k in found)),
        "ptxas_spill_bytes": 0.0,
        "ptxas_stack_bytes": 0.0,
        "ptxas_shared_bytes": float(max(0 if k.dynamic else k.shared_bytes for k in found)),
    }


def _registers(kernel: Stmt) -> int:
    """Registers per thread, estimated: 32-bit words of every per-thread local value (the
    register tile, operand fragments, values held across a barrier), FRAGMENT_REGISTERS per
    WMMA fragment, and REGISTER_OVERHEAD (index locals included). It ignores that ptxas
    reuses the registers of values whose lives do not overlap."""
    words = 0
    for s in stmts(kernel):
        if isinstance(s, Decl) and not s.shared and s.dtype != INDEX:
            size = dtypes.itemsize(dtypes.compute_dtype(scalar(s.dtype))) * lanes(s.dtype)
            words += math.prod(s.shape) * -(-size // 4)
        elif isinstance(s, Wmma) and s.op == "fragment":
            words += FRAGMENT_REGISTERS[s.use]
    return words + REGISTER_OVERHEAD


def _evaluate(expr: Expr, symbols: dict[str, int]) -> int:
    """An index expression's value with symbols bound and loop variables at 0 (so a clipped
    tail `min(T, N - o * T)` counts as a full tile)."""
    if isinstance(expr, Const):
        return int(expr.value)
    if isinstance(expr, Var):
        return symbols.get(expr.name, 0)
    if isinstance(expr, Binary):
        a, b = _evaluate(expr.a, symbols), _evaluate(expr.b, symbols)
        ops = {"+": a + b, "-": a - b, "*": a * b}
        if expr.op in ops:
            return ops[expr.op]
        if expr.op in ("//", "%") and b:
            return a // b if expr.op == "//" else a % b
        return 0
    if isinstance(expr, Call) and expr.fn in ("min", "max"):
        args = [_evaluate(a, symbols) for a in expr.args]
        return min(args) if expr.fn == "min" else max(args)
    return 0
