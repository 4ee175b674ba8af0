"""The Engram gate's weight gradients from per-block partial sums (op "engram_grad_w_reduce")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "engram_grad_w_reduce"
SCHEMA = OpSchema(
    _OP,
    "grad_w_partial[P, GW, H]: fp32, w_h[GW, H]: bf16, w_k[GW, H]: bf16, acc_h[GW, H]: fp32,"
    " acc_k[GW, H]: fp32 -> grad_w_h[GW, H]: fp32, grad_w_k[GW, H]: fp32",
    key="bf16",
    example={"P": 132, "GW": 4, "H": 7168},  # P: one persistent block per H100/H200 SM
)


def engram_grad_w_reduce(
    grad_w_partial: torch.Tensor,
    w_h: torch.Tensor,
    w_k: torch.Tensor,
    acc_h: torch.Tensor,
    acc_k: torch.Tensor,
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Engram gate's weight gradients, reduced from per-block partial sums and added to
    float32 accumulators: with ``s = grad_w_partial.sum(0)``, ``grad_w_h = acc_h + s * w_k``
    and ``grad_w_k = acc_k + s * w_h``.

    TileKernels 1.0.0's ``tile_kernels.engram.grad_w_reduce(grad_w_partial, weight_hidden,
    weight_embed, grad_weight_hidden, grad_weight_embed)`` (`w_h`, `w_k` its weights,
    `acc_h`, `acc_k` its float32 gradients), which its ``EngramGateFn`` backward runs on the
    ``grad_w_partial`` of ``engram_gate_bwd`` (each persistent block's float32 sum of the
    fused weight's gradient), accumulating into the weights' ``main_grad`` or zeros.
    TileKernels updates the gradients in place; here the sums are new tensors (or `out`),
    ``tileaot.tile_kernels.engram.grad_w_reduce`` writes them back.

    ``s`` is summed in float32 from 0 over ``p = 0, 1, ..., P - 1`` in that order, as
    TileKernels' kernel; ``acc + s * w`` is one fused multiply-add (one rounding). The result
    equals ``kernels_py.engram.engram_grad_w_reduce.reference`` (bit-exact but for
    double-rounding ties of its emulated fused multiply-add) and is within TileKernels'
    test bound (``calc_diff < 1e-10`` against ``acc + grad_w_partial.sum(0) * w``).
    Deterministic: the same inputs give the same bits on every launch.

    Args:
        grad_w_partial: CUDA tensor ``[P, GW, H]`` ``torch.float32`` (any P: TileKernels'
            kernel asks ``P % 4 == 0`` and ``H % 512 == 0``), contiguous, with a
            16-byte-aligned data pointer (``H % 4 == 0`` takes 16-byte accesses).
        w_h, w_k: ``[GW, H]`` ``torch.bfloat16`` RMSNorm weights of h and of k, on the same
            device, contiguous, aligned.
        acc_h, acc_k: ``[GW, H]`` ``torch.float32`` gradients to add to (zeros for a fresh
            gradient), on the same device, contiguous, aligned; not modified.
        out: optional ``(grad_w_h, grad_w_k)`` to write into instead of allocating, each
            ``[GW, H]`` ``torch.float32`` on the same device, contiguous, aligned, not
            overlapping the inputs (`acc_h`, `acc_k` included) or each other.

    Returns:
        ``(grad_w_h, grad_w_k)``, ``[GW, H]`` ``torch.float32`` each (the tensors of `out` if
        given). With ``P == 0`` they equal ``acc + 0 * w``; with no element nothing is
        launched.

    Raises:
        TypeError: an argument is not a tensor or has the wrong dtype; `out` is not a pair of
            tensors.
        ValueError: a tensor has the wrong rank, or shapes disagree; a tensor is not on a
            CUDA device (the same one), not contiguous or not 16-byte aligned; a size reaches
            2**31; an `out` tensor has the wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    One kernel, enqueued on torch's current stream of `grad_w_partial`'s device; the call
    returns without synchronising. Arrays of other frameworks (CuPy, ... via DLPack) work too;
    see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> partial = torch.randn(132, 4, 7168, device="cuda")
        >>> w_h, w_k = (torch.randn(4, 7168, dtype=torch.bfloat16, device="cuda") for _ in "hk")
        >>> zeros = torch.zeros(4, 7168, device="cuda")
        >>> grad_w_h, grad_w_k = tileaot.engram_grad_w_reduce(partial, w_h, w_k, zeros, zeros)
    """
    if type(grad_w_partial) is not _arrays.Tensor and _arrays.foreign(grad_w_partial):
        return _arrays.call(engram_grad_w_reduce, locals())
    inputs = {"grad_w_partial": grad_w_partial, "w_h": w_h, "w_k": w_k}
    inputs |= {"acc_h": acc_h, "acc_k": acc_k}
    bound = SCHEMA.bind(inputs)
    fw = _arrays.namespace(grad_w_partial)
    grads = SCHEMA.outputs(fw, grad_w_partial, bound, out, inputs)
    dims = bound.dims
    if dims["GW"] * dims["H"] == 0:
        return grads
    if dims["P"] == 0:
        # A sum over no blocks: the launcher refuses an empty tensor's NULL pointer, so the
        # kernel gets one zero block (s = +0.0 either way).
        grad_w_partial = grad_w_partial.new_zeros((1, dims["GW"], dims["H"]))
        dims = {**dims, "P": 1}
    tensors = (grad_w_partial, w_h, w_k, acc_h, acc_k, *grads)
    SCHEMA.launch("bf16", bound.device, tensors, (), dims)
    return grads


example_shapes = SCHEMA.example_shapes
