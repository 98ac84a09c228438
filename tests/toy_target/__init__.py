"""A toy target kind, to show that a target is one folder plus one registry line: `toy`
kernels are a C dialect of their own (`toyc`, scalar and single-threaded), built with plain
`gcc -O1`, measured by the CPU's runner and loaded through ctypes.

Nothing outside this folder knows it: `TUNEHUB_TARGETS=tests.toy_target` makes it known to
every process of a tuning.
"""

from tunehub.schemas.target import TargetKind

KIND = TargetKind("toy", "isa", "scalar", "tests.toy_target", choices=("scalar",))
