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
