"""The Engram gate's fused weight ``float32(w_h) * float32(w_k)`` (op "engram_fused_weight")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "engram_fused_weight"
SCHEMA = OpSchema(
    _OP,
    "w_h[GW, H]: bf16, w_k[GW, H]: bf16 -> w[GW, H]: fp32 as out",
    key="bf16",
    example={"GW": 4, "H": 7168},
)


def engram_fused_weight(
    w_h: torch.Tensor,
    w_k: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The Engram gate's two RMSNorm weights multiplied into one float32 weight:
    ``out = float32(w_h) * float32(w_k)`` elementwise.

    TileKernels 1.0.0's ``tile_kernels.engram.fused_weight(weight_hidden, weight_embed)``
    (``w_h`` is its ``weight_hidden``, ``w_k`` its ``weight_embed``), which its
    ``EngramGateFn`` runs before the gate's forward kernel. The product of two bf16 values is
    exact in float32, so the result is bit-exact with TileKernels' kernel and with
    ``kernels_py.engram.engram_fused_weight.reference``. (`tileaot.engram_gate` takes the two
    weights themselves; this op serves code written for TileKernels' fused weight.)

    Args:
        w_h: CUDA tensor ``[GW, H]`` (``hc_mult`` branch rows; TileKernels' shape),
            ``torch.bfloat16``, contiguous, with a 16-byte-aligned data pointer (any H;
            ``H % 8 == 0`` takes 16-byte accesses).
        w_k: the second weight, shape and dtype of `w_h`, on its device, contiguous, aligned.
        out: optional ``[GW, H]`` ``torch.float32`` tensor to write into instead of
            allocating, on the device of `w_h`, contiguous, aligned, not overlapping the
            inputs.

    Returns:
        ``[GW, H]`` ``torch.float32`` (`out` itself if given). If it has no elements, nothing
        is launched.

    Raises:
        TypeError: an argument is not a tensor or not bf16; `out` is not float32.
        ValueError: a weight is not 2-D, or the shapes differ; a tensor is not on a CUDA device
            (the same one), not contiguous or not 16-byte aligned; a size reaches 2**31;
            `out` has the wrong shape or overlaps an input.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    One kernel, enqueued on torch's current stream of `w_h`'s device; the call returns
    without synchronising. Arrays of other frameworks (CuPy, ... via DLPack) work too; see
    `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> w_h, w_k = (torch.randn(4, 7168, dtype=torch.bfloat16, device="cuda") for _ in "hk")
        >>> w = tileaot.engram_fused_weight(w_h, w_k)  # [4, 7168] float32
        >>> assert torch.equal(w, w_h.float() * w_k.float())
    """
    if type(w_h) is not _arrays.Tensor and _arrays.foreign(w_h):
        return _arrays.call(engram_fused_weight, locals())
    inputs = {"w_h": w_h, "w_k": w_k}
    bound = SCHEMA.bind(inputs)
    (w,) = SCHEMA.outputs(_arrays.namespace(w_h), w_h, bound, out, inputs)
    if w.numel():
        SCHEMA.launch("bf16", bound.device, (w_h, w_k, w), (), bound.dims)
    return w


example_shapes = SCHEMA.example_shapes
