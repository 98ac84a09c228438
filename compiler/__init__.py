"""Pure computation: signature -> IR -> schedule space -> C/CUDA source. No service imports."""

# This folder is `tunehub.compiler` (`tunehub/` links to it): loaded by its own name, it would
# be a second copy of every module in it.
if __name__ != "tunehub.compiler":
    raise ImportError(f"import it as tunehub.compiler, not {__name__}")
