"""What each CPU instruction set offers a schedule: vector register bytes and how many
architectural vector registers a register tile may fill."""

from __future__ import annotations

from tunehub.compiler import dtypes
from tunehub.schemas.target import Target

# Vector register bytes per ISA (None: "whatever the workers have", assumed AVX-512).
VECTOR_BYTES = {
    "x86_64-avx512": 64,
    "x86_64-avx2": 32,
    "x86_64": 16,
    "aarch64-neon": 16,
    "generic": 16,
    None: 64,
}


def vector_widths(target: Target, dtype: str) -> tuple[int, ...]:
    """Vector lengths (in elements of `dtype`'s compute type) up to the target's registers."""
    size = dtypes.itemsize(dtypes.compute_dtype(dtype))
    top = VECTOR_BYTES.get(target.base, 16)
    return tuple(b // size for b in (16, 32, 64) if b <= top and b // size > 1)


def vector_registers(target: Target) -> int:
    """Architectural vector registers a register tile may fill (AVX-512 has 32, others 16)."""
    return 32 if VECTOR_BYTES.get(target.base, 16) == 64 else 16
