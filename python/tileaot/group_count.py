"""Tokens per group: a histogram of group (expert) indices (op "group_count")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib, _validate
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "group_count"
SCHEMA = OpSchema(
    _OP,
    "group_idx[T, K]: i32 -> counts[G]: i32 as out",
    key="i32",
    example={"T": 4096, "K": 8, "G": 256},
    public={"G": "num_groups"},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path


def group_count(
    group_idx: torch.Tensor,
    num_groups: int,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Count how many entries of `group_idx` hold each group (TileKernels 1.0.0's
    ``group_count``): the tokens routed to each expert.

    ``counts[g]`` is the number of entries equal to ``g`` for ``0 <= g < num_groups``; negative
    entries (-1: padding, or a slot masked by EP/TP) are not counted. Exact int32 counts,
    the same on every run.

    Differences from TileKernels: `group_idx` is ``torch.int32`` (its kernel takes int64; int32
    is what tileaot's routing ops return); an entry ``>= num_groups`` is not counted (its
    kernel stops with a device assert, its reference raises: here the counts then sum to less
    than the number of non-negative entries); ``out=`` is accepted and is overwritten (not
    added to).

    Args:
        group_idx: CUDA tensor ``[T, K]`` of ``torch.int32`` group indices; contiguous, with a
            16-byte-aligned data pointer.
        num_groups: the number of groups G, an int in ``[0, 2**31)``.
        out: optional ``[G]`` ``torch.int32`` tensor to write into instead of allocating, on
            the device of `group_idx`, contiguous, aligned, not overlapping `group_idx`.

    Returns:
        ``counts``, ``[G]`` ``torch.int32`` (`out` if given): zeros when `group_idx` is empty.
        With ``G == 0`` nothing is launched.

    Raises:
        TypeError: `group_idx` or `out` is not a tensor or has the wrong dtype; `num_groups`
            is not an int.
        ValueError: `group_idx` is not 2-D; `num_groups` is outside ``[0, 2**31)``; a tensor is
            not on a CUDA device (the same one), not contiguous or not 16-byte aligned; a
            dimension or element count reaches 2**31; `out` has the wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernels are enqueued on torch's current stream of `group_idx`' device (as torch ops
    are); the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example (tokens per expert after DeepSeek-V3's router):
        >>> import torch, tileaot
        >>> idx = torch.randint(-1, 256, (4096, 8), dtype=torch.int32, device="cuda")
        >>> counts = tileaot.group_count(idx, 256)  # [256] int32
        >>> ref = torch.bincount(idx[idx >= 0].long(), minlength=256)
        >>> assert torch.equal(counts.long(), ref)
    """
    if (
        type(group_idx) is _arrays.Tensor
        and type(num_groups) is int
        and group_idx.dim() == 2
        and num_groups > 0
        and (out is None or (type(out) is _arrays.Tensor and out.dim() == 1))
    ):
        y = group_idx.new_empty(num_groups) if out is None else out
        if y.shape[0] == num_groups and _lib.fast((_OP, "i32"), (group_idx, y), (), _WRITES):
            return y
    elif type(group_idx) is not _arrays.Tensor and _arrays.foreign(group_idx):
        return _arrays.call(group_count, locals())
    g = _validate.integer("num_groups", num_groups)
    if not 0 <= g < 2**31:
        raise ValueError(f"num_groups must be an int in [0, 2**31); got {g}")
    inputs = {"group_idx": group_idx}
    bound = SCHEMA.bind(inputs, G=g)
    (y,) = SCHEMA.outputs(_arrays.namespace(group_idx), group_idx, bound, out, inputs)
    if g == 0:
        return y
    if bound.dims["T"] * bound.dims["K"] == 0:  # nothing to count (and no data pointer to pass)
        return y.zero_()
    handle = SCHEMA.launch("i32", bound.device, (group_idx, y), (), bound.dims)
    if type(group_idx) is _arrays.Tensor:  # the short path passes (group_idx, counts)
        _lib.learn((_OP, "i32"), handle)
    return y


example_shapes = SCHEMA.example_shapes
