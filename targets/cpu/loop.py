"""The CPU's intrinsic statements of the loop IR (see `compiler.loop.nodes.Stmt`) and their
dumps; `targets.cpu.render` prints them as C with `immintrin.h` intrinsics.

A dot-product instruction (`vdpbf16ps`, `vpdpbusd`) adds, into each 32-bit lane of an
accumulator, the products of a group of narrow values (two bfloat16, four 8-bit integers) of
one operand with the same group of the other. Such a group is one 32-bit word: `DotLoad`
reads a register of them from a packed panel, and `Dot` broadcasts one word of the other side
to every lane and accumulates. Their values are raw registers of packed words, which the
loop IR's dtypes do not describe, so they are statements that name their registers.

AMX's tile registers are eight 2-D arrays of up to 16 rows of 64 bytes, which `Tile`
statements configure (all eight 16 x 64 bytes), zero, load and store (rows `stride` bytes
apart in memory) and multiply: `tdpbf16ps` adds to a 16 x 16 float32 tile the products of a
16 x 32 bfloat16 tile by a tile of 16 rows of 16 words (pairs of k values), `tdpbssd`
(`tdpbusd`: unsigned rows) the same with int8 quads into int32. Linux hands out the tile
state only to a process that asked for it (`targets.cpu.runtime.allow_tiles`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tunehub.compiler.ir import Expr
from tunehub.compiler.loop import BUFFER, ZERO, Stmt, format_expr, format_stmt

# instruction -> the feature that has it at each register width (bits)
DOT_INSTRUCTIONS = {
    "vdpbf16ps": {512: "avx512_bf16"},
    "vpdpbusd": {512: "avx512_vnni", 256: "avx_vnni"},
}
# AMX tile multiplies -> their feature
TILE_INSTRUCTIONS = {"tdpbf16ps": "amx_bf16", "tdpbssd": "amx_int8", "tdpbusd": "amx_int8"}
TILE_OPS = ("config", "zero", "load", "dot", "store")
TILE_ROWS = 16  # rows of every configured tile; each row 64 bytes
# Products each instruction sums per 32-bit lane.
PRODUCTS = {"vdpbf16ps": 2, "vpdpbusd": 4, "tdpbf16ps": 2, "tdpbssd": 4, "tdpbusd": 4}
# The word broadcast where `Dot.buffer` is empty: 128 in each of four unsigned bytes, so that
# a `vpdpbusd` with it sums 128 x the other operand's bytes (the correction of the u8 x s8
# offset trick).
OFFSET_WORD = "0x80808080"


@dataclass(frozen=True, slots=True)
class DotLoad(Stmt):
    """Declares register `name` of `bits` bits, loaded (unaligned) from `buffer` at element
    `offset`."""

    name: str
    buffer: str = field(metadata=BUFFER)
    offset: Expr = ZERO
    bits: int = 512

    @property
    def kernel_work(self) -> dict[str, int]:
        """What it counts as in a microkernel's features (`compiler.features`)."""
        return {"vector_loads": 1}


@dataclass(frozen=True, slots=True)
class Dot(Stmt):
    """`acc` (a local vector of 32-bit lanes) += `instruction`(the 32-bit word of `buffer` at
    `indices` (the buffer's rank, or one flat offset) in every lane, register `operand`): the
    broadcast word is the first operand (`vpdpbusd` reads its bytes unsigned, `operand`'s
    signed). Without a buffer the word is `OFFSET_WORD`."""

    acc: str
    instruction: str
    operand: str
    buffer: str = field(default="", metadata=BUFFER)
    indices: tuple[Expr, ...] = ()
    bits: int = 512

    def __post_init__(self) -> None:
        if self.bits not in DOT_INSTRUCTIONS.get(self.instruction, {}):
            raise ValueError(f"no {self.bits}-bit {self.instruction!r} dot instruction")

    @property
    def kernel_work(self) -> dict[str, int]:
        """What it counts as in a microkernel's features (`compiler.features`): as many FMAs
        as the products it sums per lane, and its word's broadcast."""
        return {"vector_fmas": PRODUCTS[self.instruction], "broadcasts": int(bool(self.buffer))}


@dataclass(frozen=True, slots=True)
class Tile(Stmt):
    """An AMX statement (see the module doc). `op`: `config` (every tile 16 rows of 64
    bytes), `zero` (tile `tile`), `load` / `store` (tile `tile` from / to `buffer` at
    `indices`, its rows `stride` bytes apart), `dot` (tile `tile` += `instruction`(tile `a`,
    tile `b`))."""

    op: str
    tile: int = 0
    buffer: str = field(default="", metadata=BUFFER)
    indices: tuple[Expr, ...] = ()
    stride: Expr = ZERO
    a: int = 0
    b: int = 0
    instruction: str = ""

    def __post_init__(self) -> None:
        if self.op not in TILE_OPS:
            raise ValueError(f"unknown tile operation {self.op!r}")
        if self.op == "dot" and self.instruction not in TILE_INSTRUCTIONS:
            raise ValueError(f"unknown tile instruction {self.instruction!r}")

    @property
    def kernel_work(self) -> dict[str, int]:
        """A tile multiply as the 16-lane FMAs it does (16 x 16 lanes, 16 words of products
        each), a tile load as its 16 rows' vector loads."""
        if self.op == "dot":
            return {"vector_fmas": TILE_ROWS * TILE_ROWS * PRODUCTS[self.instruction]}
        return {"vector_loads": TILE_ROWS} if self.op == "load" else {}


@format_stmt.register
def _tile(stmt: Tile, depth: int = 0) -> str:
    pad = "  " * depth
    if stmt.op == "dot":
        return f"{pad}tile{stmt.tile} += {stmt.instruction}(tile{stmt.a}, tile{stmt.b})"
    if stmt.op in ("load", "store"):
        at = f"{stmt.buffer}[{', '.join(format_expr(e) for e in stmt.indices)}]"
        return f"{pad}{stmt.op} tile{stmt.tile} {at} stride={format_expr(stmt.stride)}"
    return f"{pad}{stmt.op}" + (f" tile{stmt.tile}" if stmt.op == "zero" else "")


@format_stmt.register
def _dot_load(stmt: DotLoad, depth: int = 0) -> str:
    return f"{'  ' * depth}{stmt.name}: b{stmt.bits} = {stmt.buffer}[{format_expr(stmt.offset)}]"


@format_stmt.register
def _dot(stmt: Dot, depth: int = 0) -> str:
    at = ", ".join(format_expr(e) for e in stmt.indices)
    word = f"{stmt.buffer}[{at}]" if stmt.buffer else OFFSET_WORD
    return f"{'  ' * depth}{stmt.acc} += {stmt.instruction}({word}, {stmt.operand})"
