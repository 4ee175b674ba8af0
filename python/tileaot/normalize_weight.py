"""Top-k routing weights divided by their per-token sum (op "normalize_weight")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "normalize_weight"
SCHEMA = OpSchema(
    _OP,
    "topk_weights[T, K]: fp32 -> denominator[T]: fp32, normalized_weights[T, K]: fp32",
    key="fp32",
    example={"T": 4096, "K": 8},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path


def normalize_weight(
    topk_weights: torch.Tensor,
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Divide each token's top-k weights by their sum (TileKernels 1.0.0's
    ``normalize_weight``), bit for bit.

    For each row ``t``, in float32: ``denominator[t] = ((1e-20 + w[t, 0]) + w[t, 1]) + ... +
    w[t, K - 1]`` (summed left to right from 1e-20, so a row of zeros gives zeros, not NaN)
    and ``normalized_weights[t, j] = w[t, j] / denominator[t]`` (IEEE division). NaN and
    infinities propagate as in torch (an inf weight makes its row's other weights 0 and its
    own NaN).

    Differences from TileKernels: ``out=`` is accepted; nothing else.

    Args:
        topk_weights: CUDA tensor ``[T, K]`` of ``torch.float32`` weights; contiguous, with a
            16-byte-aligned data pointer.
        out: optional ``(denominator, normalized_weights)`` to write into instead of
            allocating: ``[T]`` and ``[T, K]`` ``torch.float32`` on the device of
            `topk_weights`, contiguous, aligned, overlapping neither `topk_weights` nor each
            other.

    Returns:
        ``(denominator, normalized_weights)``: ``[T]`` and ``[T, K]`` ``torch.float32`` (the
        `out` tensors if given). With ``T == 0`` nothing is launched.

    Raises:
        TypeError: `topk_weights` or `out` is not a tensor / pair of tensors, or has the wrong
            dtype.
        ValueError: `topk_weights` is not 2-D or has no columns (K = 0, where TileKernels
            returns denominators of 1e-20); a tensor is not on a CUDA device (the same
            one), not contiguous or not 16-byte aligned; a dimension or element count reaches
            2**31; `out` has a wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `topk_weights`' device (as torch ops
    are); the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> w = torch.rand(4096, 8, device="cuda")
        >>> den, nw = tileaot.normalize_weight(w)  # [4096], [4096, 8]
        >>> torch.testing.assert_close(nw, w / w.sum(-1, keepdim=True))
    """
    if (
        type(topk_weights) is _arrays.Tensor
        and topk_weights.dim() == 2
        and _arrays.plain_pair(out, 1)
    ):
        pair = out
        if pair is None:
            pair = (
                topk_weights.new_empty(topk_weights.shape[0]),
                topk_weights.new_empty(topk_weights.shape),
            )
        if _lib.fast((_OP, "fp32"), (topk_weights, *pair), (), _WRITES):
            return pair
    elif type(topk_weights) is not _arrays.Tensor and _arrays.foreign(topk_weights):
        return _arrays.call(normalize_weight, locals())
    inputs = {"topk_weights": topk_weights}
    bound = SCHEMA.bind(inputs)
    den, nw = SCHEMA.outputs(_arrays.namespace(topk_weights), topk_weights, bound, out, inputs)
    if bound.dims["T"] == 0:
        return den, nw
    if bound.dims["K"] == 0:
        raise ValueError(
            f"topk_weights has shape {tuple(topk_weights.shape)}: no weights to normalise "
            "(K = 0); pass at least one column"
        )
    handle = SCHEMA.launch("fp32", bound.device, (topk_weights, den, nw), (), bound.dims)
    if type(topk_weights) is _arrays.Tensor:  # the short path passes these same tensors
        _lib.learn((_OP, "fp32"), handle)
    return den, nw


example_shapes = SCHEMA.example_shapes
