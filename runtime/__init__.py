"""What calling a tuned kernel needs, shared by the client and the worker: the calling
convention (`abi`), the checks of a call (`arguments`), kernel directories and dispatch
tables (`directory`, `dispatch`), and each target kind's loader (`backend`)."""

from tunehub.runtime.arguments import Arg, Arguments, numpy_dtype
from tunehub.runtime.directory import save_kernel
from tunehub.runtime.dispatch import DispatchKernel, save_dispatch
from tunehub.runtime.load import load_kernel

# This folder is `tunehub.runtime` (`tunehub/` links to it): loaded by its own name, it would
# be a second copy of every module in it.
if __name__ != "tunehub.runtime":
    raise ImportError(f"import it as tunehub.runtime, not {__name__}")

__all__ = [
    "Arg",
    "Arguments",
    "DispatchKernel",
    "load_kernel",
    "numpy_dtype",
    "save_dispatch",
    "save_kernel",
]
