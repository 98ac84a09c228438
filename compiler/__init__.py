"""Pure computation: signature -> IR -> schedule space -> C/CUDA source. No service imports."""
