"""Auxiliary-loss frequency indicator per expert (op "aux_fi")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _validate
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "aux_fi"
SCHEMA = OpSchema(
    _OP,
    "topk_idx[T, K]: i32 -> out[E]: fp32, scratch counts[E]: i32; num_aux_topk: int32",
    key="i32",
    example={"T": 4096, "K": 8, "E": 256},
    public={"E": "num_experts"},
)
_INT32 = 2**31


def aux_fi(
    topk_idx: torch.Tensor,
    num_experts: int,
    num_aux_topk: int,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Each expert's frequency indicator f_i for the auxiliary load-balancing loss (TileKernels
    1.0.0's ``aux_fi``), bit for bit as its reference.

    ``out[e] = count[e] * num_experts / (T * num_aux_topk)`` in float32, where ``count[e]`` is
    the number of entries of `topk_idx` equal to ``e`` and T the number of tokens (rows);
    negative entries (-1: padding) are not counted. Rounded as TileKernels' torch reference:
    ``float32(count) * float32(num_experts)``, then one IEEE division by
    ``float32(T * num_aux_topk)``. Deterministic.

    Differences from TileKernels: `topk_idx` is ``torch.int32`` (its kernel takes int64; int32
    is what tileaot's routers return); an entry ``>= num_experts`` is not counted (its kernel
    stops with a device assert, its reference raises); ``num_aux_topk`` must be ``>= 1``
    (TileKernels divides by zero); TileKernels' kernel adds per-block quotients with float
    atomics (order-dependent last bits), tileaot divides the exact count once.

    Args:
        topk_idx: CUDA tensor ``[T, K]`` of ``torch.int32`` expert indices; contiguous, with a
            16-byte-aligned data pointer.
        num_experts: the number of experts E, an int in ``[0, 2**31)``.
        num_aux_topk: the top-k slots the loss counts per token, an int in ``[1, 2**31)``.
        out: optional ``[E]`` ``torch.float32`` tensor to write into instead of allocating, on
            the device of `topk_idx`, contiguous, aligned, not overlapping `topk_idx`.

    Returns:
        ``f_i``, ``[E]`` ``torch.float32`` (`out` if given): zeros when `topk_idx` has no rows
        (as TileKernels). With ``E == 0`` nothing is launched.

    Raises:
        TypeError: `topk_idx` or `out` is not a tensor or has the wrong dtype; `num_experts` or
            `num_aux_topk` is not an int.
        ValueError: `topk_idx` is not 2-D; an int argument is outside its range; a tensor is
            not on a CUDA device (the same one), not contiguous or not 16-byte aligned; a
            dimension or element count reaches 2**31; `out` has the wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernels are enqueued on torch's current stream of `topk_idx`' device (as torch ops
    are); the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example (DeepSeek-V3's router: 256 experts, 8 per token):
        >>> import torch, tileaot
        >>> idx = torch.randint(0, 256, (4096, 8), dtype=torch.int32, device="cuda")
        >>> fi = tileaot.aux_fi(idx, 256, 8)  # [256] float32, mean 1.0
        >>> counts = torch.bincount(idx.flatten().long(), minlength=256)
        >>> assert torch.equal(fi, counts.float() * 256 / (4096 * 8))
    """
    if type(topk_idx) is not _arrays.Tensor and _arrays.foreign(topk_idx):
        return _arrays.call(aux_fi, locals())
    e = _validate.integer("num_experts", num_experts)
    if not 0 <= e < _INT32:
        raise ValueError(f"num_experts must be an int in [0, 2**31); got {e}")
    a = _validate.integer("num_aux_topk", num_aux_topk)
    if not 1 <= a < _INT32:
        raise ValueError(f"num_aux_topk must be an int in [1, 2**31); got {a}")
    inputs = {"topk_idx": topk_idx}
    bound = SCHEMA.bind(inputs, E=e)
    fw = _arrays.namespace(topk_idx)
    (y,) = SCHEMA.outputs(fw, topk_idx, bound, out, inputs)
    if e == 0:
        return y
    if bound.dims["T"] * bound.dims["K"] == 0:  # no entries (and no data pointer to pass)
        return y.zero_()
    workspace = SCHEMA.workspace(fw, topk_idx, bound.dims)
    SCHEMA.launch("i32", bound.device, (topk_idx, y, workspace), (float(a),), bound.dims)
    return y


example_shapes = SCHEMA.example_shapes
