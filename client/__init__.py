"""The tunehub client side: the SDK of a tunehub server (`Client`), `load_kernel` for exported
kernels (and dispatch directories of several, from `tunehub.runtime`), and the `tunehub` CLI
(`client.cli`)."""

from tunehub.client.errors import (
    ApiError,
    ClientError,
    NotFoundError,
    ServerUnreachable,
    TuningTimeout,
)
from tunehub.client.sdk import Client
from tunehub.runtime import DispatchKernel, load_kernel, save_kernel

# This folder is `tunehub.client` (`tunehub/` links to it): loaded by its own name, it would
# be a second copy of every module in it.
if __name__ != "tunehub.client":
    raise ImportError(f"import it as tunehub.client, not {__name__}")

__all__ = [
    "ApiError",
    "Client",
    "ClientError",
    "DispatchKernel",
    "NotFoundError",
    "ServerUnreachable",
    "TuningTimeout",
    "load_kernel",
    "save_kernel",
]
