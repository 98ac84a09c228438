"""The tunehub client side: `load_kernel` for exported kernels, and the `tunehub` CLI."""

from client.kernel import CompiledKernel, load_kernel, save_kernel

__all__ = ["CompiledKernel", "load_kernel", "save_kernel"]
