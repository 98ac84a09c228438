"""The kernel launches of a GPU function (see "GPU concepts" in `compiler.loop.nodes`).

Each top-level statement of the function is one kernel, launched in order on one stream: its
grid is the extents of its leading block bindings (expressions of the symbols), its block the
largest constant extent of each thread binding, its shared memory the sum of its shared arrays
(each at a 16-byte aligned offset). The CUDA renderer prints kernels from these, and
`compiler.kernel.Kernel.launch` is their JSON form (`metadata`), so the two cannot disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tunehub.compiler import dtypes
from tunehub.compiler.ir import Binary, Call, Const, Expr, Unary, Var
from tunehub.compiler.loop import (
    BLOCK_KINDS,
    THREAD_KINDS,
    Barrier,
    Decl,
    For,
    Function,
    Seq,
    Stmt,
    as_expr,
    child_stmts,
    const,
    const_value,
    lanes,
    product,
    scalar,
    stmts,
)
from tunehub.targets.cuda.loop import TensorCopy, Wgmma, tensor_map

# Static `__shared__` arrays are limited to 48 KiB per kernel; past that, the kernel takes its
# shared memory as dynamic shared memory (and the caller must opt in to the size).
STATIC_SHARED_BYTES = 48 * 1024
_ALIGN = 16
SWIZZLE_BYTES = 128  # every tensor copy writes the 128-byte swizzled layout (`TensorCopy`)


@dataclass(frozen=True)
class Launch:
    """One kernel of a GPU function. `shared_offsets` places each shared array in dynamic
    shared memory (used when `dynamic`)."""

    entry: str
    body: Stmt
    grid: tuple[Expr, Expr, Expr]
    block: tuple[int, int, int]
    shared_bytes: int
    shared_offsets: dict[str, int] = field(default_factory=dict)
    warpgroups: bool = False  # issues wgmma (see `dynamic`)

    @property
    def threads(self) -> int:
        return math.prod(self.block)

    @property
    def dynamic(self) -> bool:
        """Whether the shared arrays live in dynamic shared memory: past the static limit,
        and always for wgmma kernels, whose matrix descriptors hold shared-window addresses
        that the CPU emulator maps back only from the launch's dynamic buffer."""
        return self.warpgroups or self.shared_bytes > STATIC_SHARED_BYTES


def launches(fn: Function) -> list[Launch]:
    """The kernels of `fn`, in launch order; ValueError where the function breaks the rules
    of GPU functions (a top-level statement that is not headed by a block binding, a block
    binding inside a kernel, a thread binding of non-constant extent, a barrier that only
    part of the block reaches)."""
    top = fn.body.body if isinstance(fn.body, Seq) else (fn.body,)
    found = []
    for n, stmt in enumerate(top):
        grid, body = _grid(stmt)
        block = _block(body)
        _check_barriers(body, block, False)
        offsets, total = _shared(body)
        warpgroups = any(isinstance(s, Wgmma) for s in stmts(body))
        found.append(Launch(f"{fn.name}_{n}", stmt, grid, block, total, offsets, warpgroups))
    return found


def _grid(stmt: Stmt) -> tuple[tuple[Expr, Expr, Expr], Stmt]:
    """The grid of a kernel (its leading block bindings) and the statement inside them."""
    grid: list[Expr] = [const(1)] * 3
    seen: set[str] = set()
    while isinstance(stmt, For) and stmt.kind in BLOCK_KINDS:
        if stmt.kind in seen:
            raise ValueError(f"kernel binds {stmt.kind} twice")
        seen.add(stmt.kind)
        grid[BLOCK_KINDS.index(stmt.kind)] = stmt.extent
        stmt = stmt.body
    if not seen:
        raise ValueError("every top-level statement of a GPU function must be a kernel")
    return (grid[0], grid[1], grid[2]), stmt


def _block(body: Stmt) -> tuple[int, int, int]:
    block = [1, 1, 1]
    for s in stmts(body):
        if not isinstance(s, For):
            continue
        if s.kind in BLOCK_KINDS:
            raise ValueError("block bindings must head their kernel")
        if s.kind in THREAD_KINDS:
            extent = const_value(s.extent)
            if extent is None or extent < 1:
                raise ValueError(f"{s.kind} binding of non-constant extent")
            dim = THREAD_KINDS.index(s.kind)
            block[dim] = max(block[dim], extent)
    return (block[0], block[1], block[2])


def guarded(loop: For, block: tuple[int, int, int]) -> bool:
    """Whether a thread binding covers only part of the block (and needs a guard)."""
    return const_value(loop.extent) != block[THREAD_KINDS.index(loop.kind)]


def _check_barriers(stmt: Stmt, block: tuple[int, int, int], partial: bool) -> None:
    if isinstance(stmt, Barrier) and partial:
        raise ValueError("a barrier under a thread binding that covers part of the block")
    if isinstance(stmt, For):
        partial = partial or (stmt.kind in THREAD_KINDS and guarded(stmt, block))
    for child in child_stmts(stmt):
        _check_barriers(child, block, partial)


def _shared(body: Stmt) -> tuple[dict[str, int], int]:
    offsets: dict[str, int] = {}
    total = 0
    for s in stmts(body):
        if isinstance(s, Decl) and s.shared:
            offsets[s.name] = total
            total += -(-decl_bytes(s) // _ALIGN) * _ALIGN
    return offsets, total


def decl_bytes(decl: Decl) -> int:
    """Bytes of a local or shared array (a shared one may hold 16-bit floats)."""
    element = scalar(decl.dtype)
    if not (decl.shared and dtypes.is_half(element)):
        element = dtypes.compute_dtype(element)
    size = dtypes.itemsize(element) * lanes(decl.dtype)
    return math.prod(decl.shape) * size


def tensor_maps(fn: Function) -> dict[str, TensorCopy]:
    """The tensor map parameters of `fn`'s kernels (`tensor_map`), in parameter order, each
    with the first copy that reads through it."""
    found: dict[str, TensorCopy] = {}
    for s in stmts(fn.body):
        if isinstance(s, TensorCopy):
            found.setdefault(tensor_map(s), s)
    return found


# ----------------------------------------------------------------------------- metadata


def metadata(fn: Function, found: list[Launch]) -> dict[str, object]:
    """The JSON form of the launches (`Kernel.launch`; format in `compiler.kernel`)."""
    symbols = set(fn.symbols)
    kernels = [
        {
            "entry": k.entry,
            "grid": [extent_text(e, symbols) for e in k.grid],
            "block": list(k.block),
            "shared_bytes": k.shared_bytes if k.dynamic else 0,
        }
        for k in found
    ]
    workspace = [
        {
            "name": ws.name,
            "bytes": extent_text(
                product([*(as_expr(e) for e in ws.shape), const(dtypes.itemsize(ws.dtype))]),
                symbols,
            ),
        }
        for ws in fn.workspaces
    ]
    maps = [
        {"name": name, "arg": copy.tensor, "box": list(copy.box), "swizzle": SWIZZLE_BYTES}
        for name, copy in tensor_maps(fn).items()
    ]
    return {"kernels": kernels, "workspace": workspace, **({"tensor_maps": maps} if maps else {})}


_OPS = {"+": "+", "-": "-", "*": "*", "//": "/", "%": "%"}
_LEVEL = {"+": 1, "-": 1, "*": 2, "//": 2, "%": 2}


def extent_text(expr: Expr, symbols: set[str]) -> str:
    """An index expression of the symbols in the launch grammar (`compiler.kernel`)."""
    return _text(expr, symbols, 0)


def _text(expr: Expr, symbols: set[str], level: int) -> str:
    if isinstance(expr, Const):
        return str(int(expr.value))
    if isinstance(expr, Var):
        if expr.name not in symbols:
            raise ValueError(f"launch extent depends on {expr.name!r}, not only on symbols")
        return expr.name
    if isinstance(expr, Binary) and expr.op in _OPS:
        mine = _LEVEL[expr.op]
        text = f"{_text(expr.a, symbols, mine)} {_OPS[expr.op]} {_text(expr.b, symbols, mine + 1)}"
        return f"({text})" if mine < level else text
    if isinstance(expr, Call) and expr.fn in ("min", "max"):
        return f"{expr.fn}({', '.join(_text(a, symbols, 0) for a in expr.args)})"
    if isinstance(expr, Unary) and expr.op == "neg":
        return f"-{_text(expr.x, symbols, 3)}"
    raise ValueError(f"launch extents cannot hold {type(expr).__name__} nodes")
