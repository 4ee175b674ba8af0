"""Expert indices masked to one tensor-parallel rank, renumbered locally (op
"mask_indices_by_tp")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _lib, _validate
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "mask_indices_by_tp"
SCHEMA = OpSchema(
    _OP,
    "indices[T, K]: i32 -> masked[T, K]: i32 as out; "
    "per_gpu: int32, per_dp: int32, num_tp_ranks: int32, tp_rank: int32",
    key="i32",
    example={"T": 4096, "K": 8},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
_INT32 = 2**31


def mask_indices_by_tp(
    indices: torch.Tensor,
    n: int,
    num_ep_ranks: int,
    tp_rank: int,
    num_tp_ranks: int,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Keep the expert indices served by tensor-parallel rank `tp_rank`, renumbered to its local
    experts; every other index becomes -1 (TileKernels 1.0.0's ``mask_indices_by_tp``), bit for
    bit.

    With ``R = n // num_ep_ranks`` experts per rank and ``D = R * num_tp_ranks``: an index
    ``i < 0`` or with ``(i // R) % num_tp_ranks != tp_rank`` becomes -1; any other becomes
    ``j - (j // D) * (D - R)`` with ``j = i - tp_rank * R`` (its number among the experts of
    the ranks with this `tp_rank`). Indices are not checked against `n` (as TileKernels: one
    past the last expert is renumbered by the same formula).

    Differences from TileKernels: the indices are ``torch.int32`` (TileKernels takes any
    integer dtype, int64 from its routers; int32 is what tileaot's routing ops return);
    `tp_rank` must lie in ``[0, num_tp_ranks)`` (TileKernels masks every index otherwise);
    ``out=`` is accepted.

    Args:
        indices: CUDA tensor ``[T, K]`` of ``torch.int32`` expert indices (-1 for none);
            contiguous, with a 16-byte-aligned data pointer.
        n: experts over all EP ranks, an int with ``num_ep_ranks <= n < 2**31``.
        num_ep_ranks: expert-parallel ranks, an int >= 1.
        tp_rank: this process's tensor-parallel rank, ``0 <= tp_rank < num_tp_ranks``.
        num_tp_ranks: tensor-parallel ranks, an int >= 1 with ``R * num_tp_ranks < 2**31``.
        out: optional ``[T, K]`` ``torch.int32`` tensor to write into instead of allocating,
            on the device of `indices`, contiguous, aligned, not overlapping `indices`.

    Returns:
        The masked indices, ``[T, K]`` ``torch.int32`` (`out` if given). With no index
        nothing is launched.

    Raises:
        TypeError: `indices` or `out` is not a tensor or has the wrong dtype; an int argument
            is not an int.
        ValueError: `indices` is not 2-D; an int argument breaks a rule above (the message
            names it and its bounds); a tensor is not on a CUDA device (the same one), not
            contiguous or not 16-byte aligned; a dimension or element count reaches 2**31;
            `out` has the wrong shape or overlaps `indices`.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `indices`' device (as torch ops are);
    the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example (256 experts on 8 EP ranks, 2 TP ranks: rank 1 keeps experts 32-63, 96-127, ...):
        >>> import torch, tileaot
        >>> idx = torch.randint(0, 256, (4096, 8), dtype=torch.int32, device="cuda")
        >>> local = tileaot.mask_indices_by_tp(idx, 256, 8, 1, 2)
        >>> keep = (idx // 32) % 2 == 1
        >>> assert torch.equal(local >= 0, keep)
        >>> assert torch.equal(local[keep], (idx[keep] - 32) // 64 * 32 + idx[keep] % 32)
    """
    if (
        type(indices) is _arrays.Tensor
        and type(n) is int
        and type(num_ep_ranks) is int
        and type(tp_rank) is int
        and type(num_tp_ranks) is int
        and indices.dim() == 2
        and (out is None or type(out) is _arrays.Tensor)
        and 0 < num_ep_ranks <= n < _INT32
        and 0 <= tp_rank < num_tp_ranks
        and (n // num_ep_ranks) * num_tp_ranks < _INT32
    ):
        y = indices.new_empty(indices.shape) if out is None else out
        scalars = _scalars(n // num_ep_ranks, tp_rank, num_tp_ranks)
        if _lib.fast((_OP, "i32"), (indices, y), scalars, _WRITES):
            return y
    elif type(indices) is not _arrays.Tensor and _arrays.foreign(indices):
        return _arrays.call(mask_indices_by_tp, locals())
    scalars = _checked(n, num_ep_ranks, tp_rank, num_tp_ranks)
    inputs = {"indices": indices}
    bound = SCHEMA.bind(inputs)
    (y,) = SCHEMA.outputs(_arrays.namespace(indices), indices, bound, out, inputs)
    if y.numel() == 0:
        return y
    handle = SCHEMA.launch("i32", bound.device, (indices, y), scalars, bound.dims)
    if type(indices) is _arrays.Tensor:  # the short path passes (indices, masked)
        _lib.learn((_OP, "i32"), handle)
    return y


def _scalars(per_gpu: int, tp_rank: int, tp: int) -> tuple[float, ...]:
    """The kernel's scalars (per_gpu, per_dp, num_tp_ranks, tp_rank)."""
    return (float(per_gpu), float(per_gpu * tp), float(tp), float(tp_rank))


def _checked(n: Any, ep: Any, tp_rank: Any, tp: Any) -> tuple[float, ...]:
    """`_scalars` of the public arguments, each checked first (one-line errors naming it)."""
    names = {"n": n, "num_ep_ranks": ep, "tp_rank": tp_rank, "num_tp_ranks": tp}
    n, ep, tp_rank, tp = (_validate.integer(name, v) for name, v in names.items())
    if ep < 1:
        raise ValueError(f"num_ep_ranks must be an int >= 1; got {ep}")
    if not ep <= n < _INT32:
        raise ValueError(f"n must be in [num_ep_ranks = {ep}, 2**31); got {n}")
    if tp < 1 or (n // ep) * tp >= _INT32:
        raise ValueError(
            f"num_tp_ranks must be >= 1 with (n // num_ep_ranks) * num_tp_ranks < 2**31; got {tp}"
        )
    if not 0 <= tp_rank < tp:
        raise ValueError(f"tp_rank must be in [0, num_tp_ranks = {tp}); got {tp_rank}")
    return _scalars(n // ep, tp_rank, tp)


example_shapes = SCHEMA.example_shapes
