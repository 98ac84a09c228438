"""Workspaces in C source: the block the calling thread keeps for them between calls, and which
per-thread workspaces a function reaches outside its parallel loops.

An entry point carves its workspaces from one block (`ALLOCATOR`'s `workspace(bytes)`, see
`CStyleRenderer.function`): allocated and freed on every call, large ones went back to the OS
and their pages faulted in again each time (an NCHW conv with its copies: 73 page faults and
214 us per call from Python, 81 us in the tuner's loop).
"""

from __future__ import annotations

from tunehub.compiler.loop import For, If, Seq, Stmt, buffers_used

# At least `bytes` of 64-byte aligned scratch for this thread, the same block again on the next
# call unless it must grow. It is kept until the library is unloaded (the unloading thread's
# block is freed then: the tuner's measuring child unloads every candidate it times) or the
# process ends.
ALLOCATOR = (
    "static _Thread_local void* workspace_block;\n"
    "static _Thread_local int64_t workspace_bytes;\n"
    "__attribute__((destructor)) static void workspace_release(void) {\n"
    "  free(workspace_block);\n"
    "  workspace_block = 0;\n"
    "  workspace_bytes = 0;\n"
    "}\n"
    "static void* workspace(int64_t bytes) {\n"
    "  if (bytes > workspace_bytes) {\n"
    "    free(workspace_block);\n"
    "    size_t size = ((size_t)(bytes > 64 ? bytes : 64) + 63) & ~(size_t)63;\n"
    "    workspace_block = aligned_alloc(64, size);\n"
    "    workspace_bytes = workspace_block ? bytes : 0;\n"
    "  }\n"
    "  return workspace_block;\n}"
)


def serial_uses(stmt: Stmt) -> set[str]:
    """Buffers used outside every parallel loop: a per-thread workspace among them gets thread
    0's slice at the entry point (inside a parallel loop, each thread gets its own)."""
    if isinstance(stmt, For) and stmt.kind == "parallel":
        return set()
    if isinstance(stmt, For):
        return serial_uses(stmt.body)
    if isinstance(stmt, Seq):
        return set().union(*(serial_uses(s) for s in stmt.body))
    if isinstance(stmt, If):
        rest = serial_uses(stmt.orelse) if stmt.orelse is not None else set()
        return buffers_used(If(stmt.cond, Seq(()))) | serial_uses(stmt.then) | rest
    return buffers_used(stmt)
