"""TileKernels 1.0.0's ``tile_kernels.torch`` functions that tileaot serves with its kernels
(TileKernels has them as pure-torch references only): ``swiglu_forward`` and
``swiglu_backward``, also under ``tileaot.tile_kernels.torch.swiglu``."""

from .swiglu import swiglu_backward, swiglu_forward

__all__ = ["swiglu_backward", "swiglu_forward"]
