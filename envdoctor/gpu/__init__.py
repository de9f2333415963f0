"""GPU stack readiness: driver floors, kernels for each GPU and extension ABI, from files."""
