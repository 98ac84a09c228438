"""tunehub: a kernel autotuning service.

The subpackages are the repository's top-level folders (`tunehub.compiler` is `compiler/`,
and so on), linked from here so that a checkout imports exactly as the installed wheel does.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tunehub")
except PackageNotFoundError:  # a plain checkout on PYTHONPATH, not installed
    __version__ = "0+checkout"
