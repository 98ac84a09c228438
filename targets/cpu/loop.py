"""The CPU's intrinsic statements of the loop IR (see `compiler.loop.nodes.Stmt`) and their
dumps; `targets.cpu.render` prints them as C with `immintrin.h` intrinsics.

A dot-product instruction (`vdpbf16ps`, `vpdpbusd`) adds, into each 32-bit lane of an
accumulator, the products of a group of narrow values (two bfloat16, four 8-bit integers) of
one operand with the same group of the other. Such a group is one 32-bit word: `DotLoad`
reads a register of them from a packed panel, and `Dot` broadcasts one word of the other side
to every lane and accumulates. Their values are raw registers of packed words, which the
loop IR's dtypes do not describe, so they are statements that name their registers.
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
# Products each instruction sums per 32-bit lane.
PRODUCTS = {"vdpbf16ps": 2, "vpdpbusd": 4}
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


@format_stmt.register
def _dot_load(stmt: DotLoad, depth: int = 0) -> str:
    return f"{'  ' * depth}{stmt.name}: b{stmt.bits} = {stmt.buffer}[{format_expr(stmt.offset)}]"


@format_stmt.register
def _dot(stmt: Dot, depth: int = 0) -> str:
    at = ", ".join(format_expr(e) for e in stmt.indices)
    word = f"{stmt.buffer}[{at}]" if stmt.buffer else OFFSET_WORD
    return f"{'  ' * depth}{stmt.acc} += {stmt.instruction}({word}, {stmt.operand})"
