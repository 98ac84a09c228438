"""A C loop that calls a kernel N times: timing without ctypes' ~0.4 µs per call.

Small kernels (a 128^3 matmul takes ~20 µs) would otherwise carry a per-call overhead that
varies with the argument count. The loop calls the kernel through a pointer typed with
MAX_ARGS integer parameters; every ABI argument of a tunehub kernel (pointers, int64 symbols)
is one integer register or stack slot, and on x86-64 SysV and AArch64 the caller pops the
stack, so surplus arguments are harmless. Kernels with more arguments use the ctypes loop.

The loop is compiled once per cache directory (gcc, a fraction of a second) and reused.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from tunehub.worker.measure.case import cache_dir

MAX_ARGS = 32
_PARAMS = ", ".join(["intptr_t"] * MAX_ARGS)
_ARGS = ", ".join(f"a[{i}]" for i in range(MAX_ARGS))
SOURCE = f"""#include <stdint.h>
typedef int (*kernel_t)({_PARAMS});
int tunehub_repeat(void *fn, const intptr_t *a, int64_t n) {{
  kernel_t k = (kernel_t)fn;
  for (int64_t i = 0; i < n; i++) {{
    int code = k({_ARGS});
    if (code != 0) return code;
  }}
  return 0;
}}
"""


class Harness:
    """`repeat(fn, args, n)`: call the C function `fn` n times, stopping at a non-zero return."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._repeat = library.tunehub_repeat
        self._repeat.restype = ctypes.c_int
        self._repeat.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]

    def arguments(self, args: list[int]) -> ctypes.Array[ctypes.c_ssize_t]:
        """The argument vector `repeat` takes, for pointers and symbols given as integers."""
        return (ctypes.c_ssize_t * MAX_ARGS)(*args)

    def repeat(self, fn: int, argv: ctypes.Array[ctypes.c_ssize_t], number: int) -> int:
        return int(self._repeat(fn, argv, number))


def load(compiler: str = "gcc") -> Harness | None:
    """The harness, built on first use; None where it cannot be built (no compiler)."""
    digest = hashlib.sha256((compiler + SOURCE).encode()).hexdigest()[:16]
    path = cache_dir() / "harness" / f"repeat-{digest}.so"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            Path(tmp, "repeat.c").write_text(SOURCE)
            command = [compiler, "-O2", "-shared", "-fPIC", "-o", "repeat.so", "repeat.c"]
            try:
                subprocess.run(command, cwd=tmp, capture_output=True, timeout=120, check=True)
            except (OSError, subprocess.SubprocessError):
                return None
            os.replace(Path(tmp, "repeat.so"), path)  # atomic: other workers share the file
    return Harness(ctypes.CDLL(str(path)))
