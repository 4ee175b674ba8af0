"""TileKernels 1.0.0's ``tile_kernels.modeling.mhc``: its ``ops`` that tileaot serves."""

from . import ops

__all__ = ["ops"]
