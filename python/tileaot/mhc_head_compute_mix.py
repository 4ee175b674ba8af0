"""mHC head mix (op "mhc_head_compute_mix")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays
from ._mhc_args import float32_arg
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "mhc_head_compute_mix"
SCHEMA = OpSchema(
    _OP,
    "input_mix[*M, R]: fp32, mhc_scale[1]: fp32, mhc_base[R]: fp32"
    " -> output_mix[*M, R]: fp32 as out; mhc_pre_eps: float32",
    key="fp32",
    example={"M": 32768, "R": 4},
)


def mhc_head_compute_mix(
    input_mix: torch.Tensor,
    mhc_scale: torch.Tensor,
    mhc_base: torch.Tensor,
    mhc_pre_eps: float,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The head's pre mix: ``sigmoid(input_mix * mhc_scale[0] + mhc_base) + mhc_pre_eps``.

    TileKernels' ``mhc_head_compute_mix`` (`tile-kernels` 1.0.0, ``tile_kernels.modeling.mhc.
    ops``; reference ``tile_kernels.torch.mhc.mhc_head_compute_mix_ref``; same name and
    arguments), the step of ``mhc_head`` between ``mhc_pre_norm_fn`` and
    ``mhc_pre_apply_mix``. Float32, each operation rounded as torch rounds it (no FMA; ``sigmoid
    = 1 / (1 + expf(-z))``, the division correctly rounded): the reference's values on the
    GPU. TileKernels takes 3-D mixes ``[batch, seq, R]`` only; any leading dims work here.

    Args:
        input_mix: CUDA tensor ``[..., R]``, ``torch.float32`` (R = mhc_mult raw mixes per
            token), contiguous, with a 16-byte-aligned data pointer.
        mhc_scale: ``(1,)`` float32.
        mhc_base: ``(R,)`` float32, the per-column biases.
        mhc_pre_eps: added to the mix, a finite float.
        out: optional tensor to write into instead of allocating: `input_mix`'s shape, float32,
            contiguous, aligned, overlapping no input.

    All tensors on one CUDA device.

    Returns:
        ``[..., R]``, ``torch.float32`` (`out` itself if given); returned without launching
        anything when empty. Not differentiable yet.

    Raises:
        TypeError: a tensor argument is not a tensor or not float32; `mhc_pre_eps` is not a
            real number.
        ValueError: `input_mix` is 0-d; `mhc_scale` is not ``(1,)`` or `mhc_base` not
            ``(R,)``; `mhc_pre_eps` is not finite in float32; a tensor is not on a CUDA device
            (the same one), not contiguous or not 16-byte aligned; a size reaches 2**31; `out`
            has the wrong shape or overlaps an input.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `input_mix`'s device (as torch ops
    are); the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> mix = torch.randn(4096, 4, device="cuda")
        >>> scale, base = torch.rand(1, device="cuda"), torch.randn(4, device="cuda")
        >>> pre = tileaot.mhc_head_compute_mix(mix, scale, base, 1e-6)  # [4096, 4]
    """
    if type(input_mix) is not _arrays.Tensor and _arrays.foreign(input_mix):
        return _arrays.call(mhc_head_compute_mix, locals())
    eps = float32_arg("mhc_pre_eps", mhc_pre_eps)
    inputs = {"input_mix": input_mix, "mhc_scale": mhc_scale, "mhc_base": mhc_base}
    bound = SCHEMA.bind(inputs)
    (y,) = SCHEMA.outputs(_arrays.namespace(input_mix), input_mix, bound, out, inputs)
    if y.numel() == 0:
        return y
    SCHEMA.launch("fp32", bound.device, (input_mix, mhc_scale, mhc_base, y), (eps,), bound.dims)
    return y


example_shapes = SCHEMA.example_shapes
