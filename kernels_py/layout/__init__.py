"""Data-layout kernels: transposes."""
