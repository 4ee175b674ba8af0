"""TileKernels 1.0.0's ``tile_kernels.modeling``: the parts tileaot serves."""

from . import mhc

__all__ = ["mhc"]
