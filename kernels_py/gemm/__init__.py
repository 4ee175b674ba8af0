"""Matrix-multiply kernels."""
