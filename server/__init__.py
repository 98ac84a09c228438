"""The service side of tunehub: settings, the SQL tuning database and the tuner."""

# This folder is `tunehub.server` (`tunehub/` links to it): loaded by its own name, it would
# be a second copy of every module in it.
if __name__ != "tunehub.server":
    raise ImportError(f"import it as tunehub.server, not {__name__}")
