"""targets."""

# This folder is `tunehub.targets` (`tunehub/` links to it): loaded by its own name, it would
# be a second copy of every module in it.
if __name__ != "tunehub.targets":
    raise ImportError(f"import it as tunehub.targets, not {__name__}")
