"""Frontends: read a model's kernels off it as a task set (`schemas.taskset`).

`tir` reads TVMScript text as MLC-LLM prints it (one signature per `prim_func`, expressions
through `tir_expr`); `onnx_model` and `torch_export` translate a graph into `graph.Graph`,
which `fusion` groups as a fusing compiler would and maps onto signatures through `ops` (its
kinds, with `reductions`, written with `computes`); `taskset` collapses identical tasks and
counts FLOPs. torch and onnx are imported only inside the functions that read their models.
"""

# This folder is `tunehub.frontends` (`tunehub/` links to it): loaded by its own name, it would
# be a second copy of every module in it.
if __name__ != "tunehub.frontends":
    raise ImportError(f"import it as tunehub.frontends, not {__name__}")
