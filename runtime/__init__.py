"""What calling a tuned kernel needs, shared by the client and the worker: the calling
convention (`abi`), the checks of a call (`arguments`), kernel directories and dispatch
tables (`directory`, `dispatch`), and each target kind's loader (`backend`)."""

from tunehub.runtime.arguments import Arg, Arguments, numpy_dtype
from tunehub.runtime.directory import save_kernel
from tunehub.runtime.dispatch import DispatchKernel, save_dispatch
from tunehub.runtime.load import load_kernel

__all__ = [
    "Arg",
    "Arguments",
    "DispatchKernel",
    "load_kernel",
    "numpy_dtype",
    "save_dispatch",
    "save_kernel",
]
