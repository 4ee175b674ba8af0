"""Gradients of mhc_head_compute_mix (op "mhc_head_compute_mix_backward")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays
from ._mhc_args import same_lead
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "mhc_head_compute_mix_backward"
TOKENS = 256  # tokens per block of the first kernel (kernels_py/mhc/...backward.py)
MAX_R = 256  # the block reduction gives each column a thread
SCHEMA = OpSchema(
    _OP,
    "output_mix_grad[*M, R]: fp32, input_mix[*M, R]: fp32, mhc_scale[1]: fp32,"
    " mhc_base[R]: fp32 -> input_mix_grad[*M, R]: fp32, mhc_scale_grad[1]: fp32,"
    " mhc_base_grad[R]: fp32, scratch partial[P, 2 * R]: fp32",
    key="fp32",
    sizes={"P": f"(M + {TOKENS - 1}) // {TOKENS}"},
    example={"M": 32768, "R": 4},
)


def mhc_head_compute_mix_backward(
    output_mix_grad: torch.Tensor,
    input_mix: torch.Tensor,
    mhc_scale: torch.Tensor,
    mhc_base: torch.Tensor,
    *,
    out: tuple | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_mix_grad, mhc_scale_grad, mhc_base_grad)`` of
    :func:`tileaot.mhc_head_compute_mix` for the incoming `output_mix_grad`.

    With ``s = sigmoid(input_mix * mhc_scale[0] + mhc_base)`` recomputed as the forward rounds
    it and ``gz = output_mix_grad * (1 - s) * s``::

        input_mix_grad    = gz * mhc_scale[0]
        mhc_base_grad[j]  = sum over tokens of gz[..., j]
        mhc_scale_grad[0] = sum over tokens and columns of gz * input_mix

    in float32, the products rounded as torch's autograd through the reference rounds them
    (``input_mix_grad`` is its value on the GPU); the sums in a fixed order (block by block
    of 256 tokens, no atomics), within float32 rounding of autograd's. TileKernels' backward
    (``tile_kernels/mhc/head_compute_mix_kernel.py`` of `tile-kernels` 1.0.0) computes the
    same.

    Args:
        output_mix_grad: CUDA tensor ``[..., R]``, ``torch.float32``, ``R <= 256``.
        input_mix: the forward's ``[..., R]`` float32 (`output_mix_grad`'s shape).
        mhc_scale, mhc_base: the forward's ``(1,)`` and ``(R,)`` float32.
        out: optional ``(input_mix_grad, mhc_scale_grad, mhc_base_grad)`` to write into
            instead of allocating: the shapes of `input_mix`, `mhc_scale`, `mhc_base`.

    All tensors float32, contiguous, 16-byte aligned, on one CUDA device, outputs overlapping
    nothing.

    Returns:
        ``(input_mix_grad, mhc_scale_grad, mhc_base_grad)`` (`out`'s tensors if given); with
        no tokens, zero sums and nothing launched.

    Raises:
        TypeError: a tensor argument is not a tensor or not float32; `out` is not a 3-tuple.
        ValueError: shapes that do not fit together; R > 256; a tensor is not on a CUDA device
            (the same one), not contiguous or not 16-byte aligned; a size reaches 2**31; an
            output has the wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernels are enqueued on torch's current stream of `output_mix_grad`'s device (as torch
    ops are), with a small scratch of per-block sums; the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> mix, g = torch.randn(2, 4096, 4, device="cuda")
        >>> scale, base = torch.rand(1, device="cuda"), torch.randn(4, device="cuda")
        >>> gx, gscale, gbase = tileaot.mhc_head_compute_mix_backward(g, mix, scale, base)
    """
    if type(output_mix_grad) is not _arrays.Tensor and _arrays.foreign(output_mix_grad):
        return _arrays.call(mhc_head_compute_mix_backward, locals())
    inputs = {"output_mix_grad": output_mix_grad, "input_mix": input_mix}
    inputs |= {"mhc_scale": mhc_scale, "mhc_base": mhc_base}
    bound = SCHEMA.bind(inputs)
    same_lead("input_mix", input_mix, 1, "output_mix_grad", output_mix_grad, 1)
    r = bound.dims["R"]
    if r > MAX_R:
        raise ValueError(
            f"output_mix_grad has R = {r}; mhc_head_compute_mix_backward supports R <= {MAX_R}"
        )
    fw = _arrays.namespace(input_mix)
    outs = SCHEMA.outputs(fw, input_mix, bound, out, inputs)
    if bound.dims["M"] == 0 or r == 0:
        for t in outs[1:]:
            t.zero_()
        return outs
    tensors = (output_mix_grad, input_mix, mhc_scale, mhc_base, *outs)
    workspace = SCHEMA.workspace(fw, input_mix, bound.dims)
    SCHEMA.launch("fp32", bound.device, (*tensors, workspace), (), bound.dims)
    return outs


example_shapes = SCHEMA.example_shapes
