"""What every GPU target kind shares, listed by each (CUDA today; HIP could list it as it is):
the stage schedules that need only blocks, threads, warps and shared memory (`schedule/`),
the device limits a block is checked against (`limits`, each kind giving its table) and the
compiler facet's part that lays out a fused row group as one block per row (`backend`).

Not a target kind itself (it has no facets and no line in `BUILTIN_KINDS`): what needs one
vendor's instructions (CUDA's tensor cores, `cp.async`, the copy engine) stays in that
kind's folder.
"""
