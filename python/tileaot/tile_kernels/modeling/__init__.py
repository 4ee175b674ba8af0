"""TileKernels 1.0.0's ``tile_kernels.modeling``: the parts tileaot serves."""

from . import engram, mhc

__all__ = ["engram", "mhc"]
