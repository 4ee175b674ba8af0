"""Gradient of sinkhorn_normalize with respect to its logits (op "sinkhorn_normalize_backward")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays
from ._schema import OpSchema
from ._sinkhorn_args import check_args

if TYPE_CHECKING:
    import torch

_OP = "sinkhorn_normalize_backward"
SCHEMA = OpSchema(
    _OP,
    "grad_out[*M, N, N]: fp32, logits[*M, N, N]: fp32 -> grad_logits[*M, N, N]: fp32 as out; "
    "repeat: int32, eps: float32",
    key="fp32",
    example={"M": 32768, "N": 4},
)


def sinkhorn_normalize_backward(
    grad_out: torch.Tensor,
    logits: torch.Tensor,
    repeat: int = 10,
    eps: float = 1e-6,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``grad_logits`` of :func:`tileaot.sinkhorn_normalize` for the incoming ``grad_out``.

    The vector-Jacobian product of ``P = sinkhorn_normalize(logits, repeat, eps)`` (TileKernels'
    algorithm, see there): back-propagation through each of the ``2 * repeat - 1``
    normalisation steps, the ``+ eps`` and the row softmax, in float32. The forward is
    recomputed inside the kernel (checkpointed every 16, 8 or 4 pairs for N = 4, 8 and the
    rest), so nothing from the forward call is needed; the cost is roughly
    ``2 * repeat + repeat**2 / 32`` pair evaluations for N = 4 (the forward: repeat). Matches
    float64 autograd of the documented forward to about 1e-6 relative (float32), as
    TileKernels' backward matches autograd of its reference.

    Args:
        grad_out: CUDA tensor ``[..., N, N]``, ``torch.float32``, the gradient of a loss with
            respect to ``P``; contiguous, with a 16-byte-aligned data pointer.
        logits: the forward's input: the shape, dtype and device of `grad_out`, contiguous,
            aligned; ``1 <= N <= 16``.
        repeat: the forward's `repeat`, an int in ``[1, 65536]``.
        eps: the forward's `eps`, a finite float ``>= 0``.
        out: optional tensor to write into instead of allocating: the shape, dtype and device
            of `logits`, contiguous, aligned, overlapping neither input.

    Returns:
        ``grad_logits``, the shape of `logits`, ``torch.float32`` (`out` itself if given). If
        `logits` has no elements, it is returned without launching anything.

    Raises:
        TypeError: a tensor argument is not a tensor or not float32; `repeat` is not an int;
            `eps` is not a real number.
        ValueError: `logits` is not ``(..., N, N)`` with N <= 16; `grad_out` has another
            shape; `repeat` outside [1, 65536]; `eps` < 0 or not finite; a tensor is not on a CUDA
            device (the same one), not contiguous or not 16-byte aligned; a size reaches
            2**31; `out` has the wrong shape or overlaps an input.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `logits`' device (as torch ops are);
    the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> logits = torch.randn(4096, 4, 4, device="cuda")
        >>> grad_out = torch.randn_like(logits)
        >>> g = tileaot.sinkhorn_normalize_backward(grad_out, logits, repeat=20, eps=1e-6)
    """
    if type(grad_out) is not _arrays.Tensor and _arrays.foreign(grad_out):
        return _arrays.call(sinkhorn_normalize_backward, locals())
    inputs = {"grad_out": grad_out, "logits": logits}
    bound = SCHEMA.bind(inputs)
    repeat, eps = check_args("logits", bound.dims["N"], repeat, eps)
    if grad_out.shape != logits.shape:  # the leading dims too (the schema ties only N)
        raise ValueError(
            f"grad_out has shape {tuple(grad_out.shape)}; it must match logits "
            f"{tuple(logits.shape)}"
        )
    (grad,) = SCHEMA.outputs(_arrays.namespace(logits), logits, bound, out, inputs)
    if logits.numel() == 0:
        return grad
    SCHEMA.launch("fp32", bound.device, (grad_out, logits, grad), (repeat, eps), bound.dims)
    return grad


example_shapes = SCHEMA.example_shapes
