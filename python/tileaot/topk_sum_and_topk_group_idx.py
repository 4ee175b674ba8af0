"""The best expert groups per token by their top-1/top-2 score sums (op
"topk_sum_and_topk_group_idx")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib, _validate
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "topk_sum_and_topk_group_idx"
SCHEMA = OpSchema(
    _OP,
    "scores[T, G, S]: fp32 -> group_idx[T, K]: i32 as out; n: int32",
    key="fp32",
    example={"T": 4096, "G": 8, "S": 32, "K": 4},
    public={"K": "num_topk_groups"},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
MAX_GROUPS = 32  # a lane per group, as TileKernels' kernel


def topk_sum_and_topk_group_idx(
    scores: torch.Tensor,
    num_topk_sum: int,
    num_topk_groups: int,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The `num_topk_groups` best groups of each token, a group valued by the sum of its
    `num_topk_sum` largest scores (TileKernels 1.0.0's ``topk_sum_and_topk_group_idx``).

    For each token ``t``: ``value[g] = sum of the num_topk_sum largest scores[t, g, :]`` in
    float32, and ``group_idx[t]`` lists the groups of largest value, largest first. Equal
    values go to the smaller group and a NaN value ranks above every other one (+inf
    included), as TileKernels' ``stable_topk`` (a stable descending ``torch.sort``): a NaN
    score makes its group's value NaN, as does ``+inf + -inf``; -0.0 ties with +0.0. The
    indices are the same on every GPU and every run, bit for bit TileKernels' reference.

    Differences from TileKernels: the indices are ``torch.int32`` (its are int64; int32 is
    what tileaot's other routing ops use), and ``out=`` is accepted.

    Args:
        scores: CUDA tensor ``[T, G, S]`` of ``torch.float32``: G groups of S expert scores
            per token (``scores.view(T, G, E // G)`` of a ``[T, E]`` router output),
            ``1 <= G <= 32``; contiguous, with a 16-byte-aligned data pointer.
        num_topk_sum: scores summed per group, 1 or 2 (at most S).
        num_topk_groups: groups kept per token K, an int with ``1 <= K <= G``.
        out: optional ``[T, K]`` ``torch.int32`` tensor to write into instead of allocating,
            on the device of `scores`, contiguous, aligned, not overlapping `scores`.

    Returns:
        ``group_idx``, ``[T, K]`` ``torch.int32`` group indices (`out` if given). With
        ``T == 0`` nothing is launched.

    Raises:
        TypeError: `scores` or `out` is not a tensor or has the wrong dtype; `num_topk_sum` or
            `num_topk_groups` is not an int.
        ValueError: `scores` is not 3-D; G is outside ``[1, 32]``; `num_topk_sum` is not 1 or
            2 or exceeds S; `num_topk_groups` is outside ``[1, G]``; a tensor is not on a CUDA
            device (the same one), not contiguous or not 16-byte aligned; a dimension or
            element count reaches 2**31; `out` has the wrong shape or overlaps `scores`.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `scores`' device (as torch ops are);
    the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example (DeepSeek-V3's group stage: 8 groups of 32 experts, top-2 sums, 4 kept):
        >>> import torch, tileaot
        >>> scores = torch.randn(4096, 8, 32, device="cuda")
        >>> idx = tileaot.topk_sum_and_topk_group_idx(scores, 2, 4)  # [4096, 4] int32
        >>> value = scores.topk(2, dim=-1).values.sum(-1)
        >>> ref = torch.sort(value, dim=-1, descending=True, stable=True).indices[:, :4]
        >>> assert torch.equal(idx.long(), ref)
    """
    if (
        type(scores) is _arrays.Tensor
        and type(num_topk_sum) is int
        and type(num_topk_groups) is int
        and scores.dim() == 3
        and 0 < num_topk_groups <= scores.shape[1] <= MAX_GROUPS
        and 0 < num_topk_sum <= min(2, scores.shape[2])
        and (out is None or (type(out) is _arrays.Tensor and out.dim() == 2))
    ):
        y = out
        if y is None:
            y = scores.new_empty(scores.shape[0], num_topk_groups, dtype=_arrays._torch.int32)
        if y.shape[-1] == num_topk_groups and _lib.fast(
            (_OP, "fp32"), (scores, y), (float(num_topk_sum),), _WRITES
        ):
            return y
    elif type(scores) is not _arrays.Tensor and _arrays.foreign(scores):
        return _arrays.call(topk_sum_and_topk_group_idx, locals())
    n = _validate.integer("num_topk_sum", num_topk_sum)
    k = _validate.integer("num_topk_groups", num_topk_groups)
    bound = SCHEMA.bind({"scores": scores}, K=k)
    g, s = bound.dims["G"], bound.dims["S"]
    if not 0 < g <= MAX_GROUPS:
        raise ValueError(
            f"scores has G = {g} groups; topk_sum_and_topk_group_idx supports 1 <= G <= "
            f"{MAX_GROUPS} (a [T, G, S] tensor)"
        )
    if n not in (1, 2) or n > s:
        raise ValueError(
            f"num_topk_sum must be 1 or 2 and at most the S = {s} scores of a group; got {n}"
        )
    if not 0 < k <= g:
        raise ValueError(f"num_topk_groups must be in [1, G = {g}]; got {k}")
    (y,) = SCHEMA.outputs(_arrays.namespace(scores), scores, bound, out, {"scores": scores})
    if bound.dims["T"] == 0:
        return y
    handle = SCHEMA.launch("fp32", bound.device, (scores, y), (float(n),), bound.dims)
    if type(scores) is _arrays.Tensor:  # the short path passes (scores, group_idx)
        _lib.learn((_OP, "fp32"), handle)
    return y


example_shapes = SCHEMA.example_shapes
