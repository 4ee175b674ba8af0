"""Each row's group indices without repeats (op "inplace_unique_group_indices")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib, _validate
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "inplace_unique_group_indices"
SCHEMA = OpSchema(
    _OP,
    "group_indices[T, K]: i32 -> out[T, K]: i32",
    key="i32",
    example={"T": 4096, "K": 4},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path


def inplace_unique_group_indices(
    group_indices: torch.Tensor,
    num_groups: int,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """`group_indices` with each repeat within a row set to -1 (TileKernels 1.0.0's
    ``inplace_unique_group_indices``), bit for bit as its reference, written to a new tensor.

    ``out[t, j] = -1`` where ``group_indices[t, j]`` equals some ``group_indices[t, i]`` with
    ``i < j``, else ``group_indices[t, j]``: the leftmost occurrence of each value in a row
    stays. Every value is compared, negative ones included (a repeated -5 becomes -1, as
    TileKernels' reference; its kernel leaves negatives alone and takes groups < 128 only).
    `num_groups` is not used by the computation (TileKernels' reference ignores it too).

    Differences from TileKernels: the result is written to `out` (a new tensor by default),
    not into `group_indices` (``tileaot.tile_kernels.moe.inplace_unique_group_indices`` copies
    it back for TileKernels' in-place update); the indices are ``torch.int32`` (its kernel
    takes int64; int32 is what tileaot's routing ops return); any `num_groups` in
    ``[0, 2**31)`` is accepted (TileKernels: at most 128).

    Args:
        group_indices: CUDA tensor ``[T, K]`` of ``torch.int32`` group indices; contiguous,
            with a 16-byte-aligned data pointer.
        num_groups: the number of groups, an int in ``[0, 2**31)`` (kept for TileKernels'
            signature).
        out: optional ``[T, K]`` ``torch.int32`` tensor to write into instead of allocating,
            on the device of `group_indices`, contiguous, aligned, not overlapping it.

    Returns:
        The deduplicated indices, ``[T, K]`` ``torch.int32`` (`out` if given). With no entry
        nothing is launched.

    Raises:
        TypeError: `group_indices` or `out` is not a tensor or has the wrong dtype;
            `num_groups` is not an int.
        ValueError: `group_indices` is not 2-D; `num_groups` is outside ``[0, 2**31)``; a
            tensor is not on a CUDA device (the same one), not contiguous or not 16-byte
            aligned; a dimension or element count reaches 2**31; `out` has the wrong shape or
            overlaps `group_indices`.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `group_indices`' device (as torch ops
    are); the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example (a token's 4 groups, one picked twice):
        >>> import torch, tileaot
        >>> idx = torch.tensor([[3, 1, 3, -1]], dtype=torch.int32, device="cuda")
        >>> tileaot.inplace_unique_group_indices(idx, 8).tolist()
        [[3, 1, -1, -1]]
    """
    if (
        type(group_indices) is _arrays.Tensor
        and type(num_groups) is int
        and group_indices.dim() == 2
        and 0 <= num_groups < _INT32
        and (out is None or type(out) is _arrays.Tensor)
    ):
        y = group_indices.new_empty(group_indices.shape) if out is None else out
        if _lib.fast((_OP, "i32"), (group_indices, y), (), _WRITES):
            return y
    elif type(group_indices) is not _arrays.Tensor and _arrays.foreign(group_indices):
        return _arrays.call(inplace_unique_group_indices, locals())
    g = _validate.integer("num_groups", num_groups)
    if not 0 <= g < _INT32:
        raise ValueError(f"num_groups must be an int in [0, 2**31); got {g}")
    inputs = {"group_indices": group_indices}
    bound = SCHEMA.bind(inputs)
    (y,) = SCHEMA.outputs(_arrays.namespace(group_indices), group_indices, bound, out, inputs)
    if y.numel() == 0:
        return y
    handle = SCHEMA.launch("i32", bound.device, (group_indices, y), (), bound.dims)
    if type(group_indices) is _arrays.Tensor:  # the short path passes (group_indices, out)
        _lib.learn((_OP, "i32"), handle)
    return y


_INT32 = 2**31
example_shapes = SCHEMA.example_shapes
