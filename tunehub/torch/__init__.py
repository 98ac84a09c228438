"""Tuned kernels inside PyTorch (`pip install tunehub[torch]`): `optimize(model,
example_inputs, source)` returns the model with every task that has a verified kernel in
`source` (a tunehub server's URL, or a tuning database), faster here than the ops it
replaces, running that kernel where the ops were; `.report` says which tasks do and why the
others do not, and whether the whole module beat the eager one.

    from tunehub.torch import optimize
    fast = optimize(model, (x,), "http://127.0.0.1:8000")
    y = fast(x)

The core package never imports this one (nor torch).
"""

from tunehub.torch.optimize import OptimizedModule, Report, TaskReport, optimize

__all__ = ["OptimizedModule", "Report", "TaskReport", "optimize"]
