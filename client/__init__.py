"""The tunehub client side: the SDK of a tunehub server (`Client`), `load_kernel` for exported
kernels (and dispatch directories of several), and the `tunehub` CLI (`client.cli`)."""

from client.dispatch import DispatchKernel
from client.kernel import CompiledKernel, load_kernel, save_kernel
from client.sdk import (
    ApiError,
    Client,
    ClientError,
    NotFoundError,
    ServerUnreachable,
    TuningTimeout,
)

__all__ = [
    "ApiError",
    "Client",
    "ClientError",
    "CompiledKernel",
    "DispatchKernel",
    "NotFoundError",
    "ServerUnreachable",
    "TuningTimeout",
    "load_kernel",
    "save_kernel",
]
