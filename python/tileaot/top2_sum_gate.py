"""DeepSeek-V3's MoE router with TileKernels' semantics (op "top2_sum_gate")."""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

from . import _arrays, _lib, _validate
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "top2_sum_gate"
SCHEMA = OpSchema(
    _OP,
    "logits[M, E]: fp32, bias[E]: fp32 -> idx[M, P]: i32, weights[M, P]: fp32; "
    "k: int32, n_group: int32, topk_group: int32, per_rank: int32, tp_rank: int32, "
    "num_tp: int32, scale: float32",
    key="fp32,{scoring}",
    example={"M": 4096, "E": 256, "P": 8},
    sizes={"P": "K + S"},  # idx's columns: k routed experts, then the shared ones
    public={"K": "k", "S": "num_shared_experts"},
)
_WRITES = SCHEMA.writes
SCORINGS = ("sigmoid",)  # TileKernels also has softmax and sqrtsoftplus: not built here
MAX_EXPERTS = 512
MAX_COLUMNS = 32  # k + num_shared_experts: one lane of the token's warp each
MAX_GROUPS = 32
_INT32 = 2**31


def top2_sum_gate(
    logits: torch.Tensor,
    bias: torch.Tensor,
    k: int,
    num_groups: int = 0,
    num_topk_groups: int = 0,
    routed_scaling_factor: float = 1.0,
    num_shared_experts: int = 0,
    num_ep_ranks: int = 1,
    tp_rank: int = 0,
    num_tp_ranks: int = 1,
    scoring_func: str = "sigmoid",
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3's router: sigmoid scores, a correction bias for the selection, group-limited
    top-k, renormalised and scaled weights, as TileKernels 1.0.0's ``top2_sum_gate``.

    For each row ``t`` of `logits` (E experts), all in float32:

    * ``score = sigmoid(logits[t])`` (torch's formula ``1 / (1 + expf(-x))``, IEEE division)
      and ``biased = score + bias``: the selection ranks `biased`, the weights use `score`.
    * With ``num_groups != num_topk_groups`` the experts form `num_groups` groups of
      ``E / num_groups`` consecutive experts; a group's value is the sum of its two largest
      biased scores, the `num_topk_groups` best groups stay (ties to the smaller group, NaN
      first) and the other groups' experts are not picked (their biased score is -inf).
    * ``idx[t, :k]``: the `k` experts of largest biased score, largest first; equal scores go
      to the smaller expert index, NaN ranks above everything (a stable descending sort, as
      TileKernels' ``stable_topk``): the same on every GPU and run.
    * ``weights[t, :k] = score[idx] / max(sum(score[idx]), 1e-20) * routed_scaling_factor``
      (the denominator summed in another order than torch's: equal to TileKernels' reference
      within ``torch.allclose``, the bound of its tests; float32).
    * ``num_shared_experts`` S > 0 appends columns ``k .. k + S - 1`` holding the shared
      experts ``E, ..., E + S - 1`` with weight 1.0 (TileKernels' ``use_shared_as_routed``).
    * EP/TP (TileKernels' masking, no physical expert map): with ``R = E // num_ep_ranks``
      experts per rank, an index ``i`` becomes -1 unless ``(i // R) % num_tp_ranks ==
      tp_rank``, else the local number ``j - (j // (R * num_tp_ranks)) * (R * num_tp_ranks -
      R)`` with ``j = i - tp_rank * R``. The weights of masked columns are kept.

    NaN logits rank first and make their row's weights NaN (TileKernels' kernel refuses them
    with a device assert; its reference orders them so, as here). -inf and +inf logits are
    scores 0 and 1.

    Differences from TileKernels' signature: indices are ``torch.int32`` (its are int64; int32
    is what `tileaot.moe_expand` takes), ``use_shared_as_routed`` is ``num_shared_experts > 0``,
    and there is no `ep_rank`, `mask`, `fix_routing_mask`, `to_physical_map`, `logical_count`
    or `unmapped_topk_idx` (`ep_rank` only picks a duplicate through the physical map).
    Only ``scoring_func="sigmoid"`` is built (DeepSeek-V3, Kimi-K2, GLM-4.5).

    Args:
        logits: CUDA tensor ``[T, E]`` of ``torch.float32`` router logits, ``1 <= E <= 512``;
            contiguous, with a 16-byte-aligned data pointer. E = 160, 256 and 384 run
            specialised kernels in the default build (a build config can add any E), other E
            a generic one.
        bias: ``(E,)`` ``torch.float32`` correction bias (DeepSeek-V3's
            ``e_score_correction_bias``; zeros for none), same device, contiguous, aligned.
        k: routed experts per token, an int with ``1 <= k <= E`` and ``k + S <= 32``.
        num_groups: expert groups (an int >= 0, dividing E; 0 together with
            ``num_topk_groups = 0``: no groups). Groups apply when it differs from
            `num_topk_groups`; then ``num_groups <= 32``, a group holds at least 2 experts and
            ``k <= num_topk_groups * E / num_groups``.
        num_topk_groups: groups kept per token, ``0 <= num_topk_groups <= num_groups``, 0
            exactly when `num_groups` is 0.
        routed_scaling_factor: multiplies the routed weights; a finite real number.
        num_shared_experts: shared-expert columns S appended (an int >= 0; default 0).
        num_ep_ranks: expert-parallel ranks, an int in ``[1, E]``.
        tp_rank: this process's tensor-parallel rank, ``0 <= tp_rank < num_tp_ranks``.
        num_tp_ranks: tensor-parallel ranks, an int >= 1 (with ``R * num_tp_ranks < 2**31``).
        scoring_func: ``"sigmoid"``.
        out: optional ``(idx, weights)`` to write into: ``[T, k + S]`` ``torch.int32`` and
            ``[T, k + S]`` ``torch.float32`` on the device of `logits`, contiguous, aligned,
            overlapping no input and not each other.

    Returns:
        ``(idx, weights)``: ``[T, k + S]`` ``torch.int32`` expert indices (-1 where EP/TP masks
        them) and ``[T, k + S]`` ``torch.float32`` weights (the `out` tensors if given). With
        ``T == 0`` nothing is launched.

    Raises:
        TypeError: a tensor argument is not a tensor or has the wrong dtype; `out` is not a
            pair of tensors; an int argument is not an int, `routed_scaling_factor` not a real
            number, `scoring_func` not a str.
        ValueError: `logits` is not 2-D or E is outside ``[1, 512]``; `bias` is not ``(E,)``;
            an argument breaks a rule above (the message names it and its bounds); a tensor is
            not on a CUDA device (the same one), not contiguous or not 16-byte aligned; a size
            reaches 2**31; `out` has a wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the scoring or the GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `logits`' device (as torch ops are);
    the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example (DeepSeek-V3: 256 experts in 8 groups, 4 kept, 8 picked, scaling 2.5):
        >>> import torch, tileaot
        >>> logits = torch.randn(4096, 256, device="cuda")
        >>> bias = torch.randn(256, device="cuda") * 0.1
        >>> idx, w = tileaot.top2_sum_gate(logits, bias, 8, 8, 4, 2.5)  # [4096, 8] each
        >>> used = torch.zeros(4096, 8, dtype=torch.bool, device="cuda")
        >>> assert (used.scatter_(1, idx.long() // 32, True).sum(-1) <= 4).all()  # 4 groups
        >>> torch.testing.assert_close(w.sum(-1), torch.full((4096,), 2.5, device="cuda"))
    """
    if type(logits) is not _arrays.Tensor and _arrays.foreign(logits):
        return _arrays.call(top2_sum_gate, locals())
    options = (
        k,
        num_groups,
        num_topk_groups,
        routed_scaling_factor,
        num_shared_experts,
        num_ep_ranks,
        tp_rank,
        num_tp_ranks,
        scoring_func,
    )
    if (
        type(logits) is _arrays.Tensor
        and type(bias) is _arrays.Tensor
        and logits.dim() == 2
        and bias.dim() == 1
        and bias.shape[0] == logits.shape[1]
        and _arrays.plain_pair(out, 2)
    ):
        scalars = _scalars(logits.shape[1], *options)
        width = k + num_shared_experts  # P: the kernel takes it from idx's shape
        pair = out
        if pair is None:
            shape = (logits.shape[0], width)
            pair = logits.new_empty(shape, dtype=_arrays._torch.int32), logits.new_empty(shape)
        if pair[0].shape[-1] == width and _lib.fast(
            (_OP, scoring_func), (logits, bias, *pair), scalars, _WRITES
        ):
            return pair
    inputs = {"logits": logits, "bias": bias}
    bound = SCHEMA.bind(inputs)
    scalars = _scalars(bound.dims["E"], *options)
    bound.dims.update(K=k, S=num_shared_experts)  # checked: now the P rule may use them
    SCHEMA.complete(bound.dims)
    idx, weights = SCHEMA.outputs(_arrays.namespace(logits), logits, bound, out, inputs)
    if bound.dims["M"] == 0:
        return idx, weights
    tensors = (logits, bias, idx, weights)
    handle = SCHEMA.launch(f"fp32,{scoring_func}", bound.device, tensors, scalars, bound.dims)
    if type(logits) is _arrays.Tensor:  # the short path passes these same tensors
        _lib.learn((_OP, scoring_func), handle)
    return idx, weights


def _scalars(
    e: int,
    k: Any,
    num_groups: Any,
    num_topk_groups: Any,
    scaling: Any,
    shared: Any,
    ep: Any,
    tp_rank: Any,
    tp: Any,
    scoring: Any,
) -> tuple[float, ...]:
    """The kernel's scalars (k, n_group, topk_group, per_rank, tp_rank, num_tp, scale), every
    argument checked first against the E experts of `logits`."""
    ints = {
        "k": k,
        "num_groups": num_groups,
        "num_topk_groups": num_topk_groups,
        "num_shared_experts": shared,
        "num_ep_ranks": ep,
        "tp_rank": tp_rank,
        "num_tp_ranks": tp,
    }
    for name, value in ints.items():
        _validate.integer(name, value)
    if isinstance(scaling, bool) or not isinstance(scaling, numbers.Real):
        raise TypeError(
            f"routed_scaling_factor must be a real number, got {type(scaling).__name__}"
        )
    if not math.isfinite(scaling):
        raise ValueError(f"routed_scaling_factor must be finite, got {scaling}")
    if not isinstance(scoring, str):
        raise TypeError(f"scoring_func must be a str, got {type(scoring).__name__}")
    if scoring not in SCORINGS:
        raise ValueError(
            f"scoring_func must be 'sigmoid' (tileaot builds no {scoring!r} top2_sum_gate); "
            f"got {scoring!r}"
        )
    if not 0 < e <= MAX_EXPERTS:
        raise ValueError(f"logits has E = {e} experts; top2_sum_gate supports 1 <= E <= 512")
    grouped = _groups(e, k, num_groups, num_topk_groups)
    if shared < 0 or k < 1 or k > e or k + shared > MAX_COLUMNS:
        raise ValueError(
            f"k must be in [1, E = {e}] and k + num_shared_experts <= {MAX_COLUMNS}; got k = "
            f"{k}, num_shared_experts = {shared}"
        )
    if not 1 <= ep <= e:
        raise ValueError(f"num_ep_ranks must be in [1, E = {e}]; got {ep}")
    if tp < 1 or not 0 <= tp_rank < tp or (e // ep) * tp >= _INT32:
        raise ValueError(
            f"tp_rank must be in [0, num_tp_ranks) with num_tp_ranks >= 1 and "
            f"(E // num_ep_ranks) * num_tp_ranks < 2**31; got tp_rank = {tp_rank}, "
            f"num_tp_ranks = {tp}"
        )
    n_group = num_groups if grouped else 0
    return (
        float(k),
        float(n_group),
        float(num_topk_groups),
        float(e // ep),
        float(tp_rank),
        float(tp),
        float(scaling),
    )


def _groups(e: int, k: int, groups: int, kept: int) -> bool:
    """Check the group arguments (TileKernels' rules); True if groups limit the selection."""
    if groups < 0 or kept < 0 or (groups == 0) != (kept == 0) or kept > groups:
        raise ValueError(
            "num_groups and num_topk_groups must both be 0 (no groups) or satisfy "
            f"1 <= num_topk_groups <= num_groups; got {groups} and {kept}"
        )
    if groups and e % groups:
        raise ValueError(f"num_groups = {groups} must divide the E = {e} experts")
    if groups == kept:
        return False
    size = e // groups
    if groups > MAX_GROUPS or size < 2:
        raise ValueError(
            f"num_groups = {groups} with E = {e}: groups limit the selection only with at most "
            f"{MAX_GROUPS} groups of at least 2 experts (a group's value sums its top two)"
        )
    if k > kept * size:
        raise ValueError(
            f"k = {k} exceeds the {kept * size} experts of the num_topk_groups = {kept} groups "
            f"of {size} kept"
        )
    return True


example_shapes = SCHEMA.example_shapes
