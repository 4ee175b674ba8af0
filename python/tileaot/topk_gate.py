"""Top-k expert gate for mixture-of-experts routing (op "topk_gate")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib, _validate
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "topk_gate"
SCHEMA = OpSchema(
    _OP,
    "scores[T, E]: fp32 -> idx[T, K]: i32, weights[T, K]: fp32; renorm: int32",
    key="fp32,{scoring}",
    example={"T": 4096, "E": 256, "K": 8},
    public={"K": "k"},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
_KEYS = {"softmax": "fp32,softmax", "sigmoid": "fp32,sigmoid"}  # scoring -> dispatch key
MAX_EXPERTS = 512
MAX_K = 32  # as TileKernels' top2_sum_gate


def topk_gate(
    scores: torch.Tensor,
    k: int,
    scoring: str = "softmax",
    renormalize: bool = True,
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick the `k` highest-scoring experts of each token and their gate weights.

    For each row ``t`` of `scores` (TileKernels 1.0.0's routing semantics):

    * ``idx[t]`` holds the `k` experts of largest rank, largest first. The rank is the score
      itself (softmax) or its float32 sigmoid (sigmoid), as TileKernels' ``top2_sum_gate``
      ranks them; the float32 sigmoid saturates (it is 1.0 from a logit of about 17 up), so
      large logits tie. Equal ranks are ordered by expert index, smaller first, and a NaN
      score ranks above every other one (+inf included), as TileKernels' ``stable_topk`` (a
      stable descending ``torch.sort``): the result is the same on every GPU and every run.
    * ``weights[t, j]`` is ``softmax(scores[t, :])[idx[t, j]]`` (softmax over all experts) or
      the ranked ``sigmoid(scores[t, idx[t, j]])``; with `renormalize` they are divided by
      their sum over the `k` picks, clamped to at least 1e-20 (as ``top2_sum_gate``; for
      softmax that is a softmax over the picked scores alone).

    This is ``top2_sum_gate`` with no bias, no expert groups, a scaling factor of 1, no
    shared experts and one EP/TP rank (its weights are always renormalised). The sigmoid is
    ``1 / (1 + expf(-x))`` in float32 with IEEE division (torch's CUDA formula). Weights are
    float32 and agree with a float64 computation to about 1e-6 relative. NaN propagates as in
    torch: a NaN score gets a NaN weight, and a softmax row holding a NaN or +inf has NaN
    weights, as does a row whose scores are all -inf; sigmoid weights of scores below about
    -87 underflow to 0 (renormalised: 0 / 1e-20 = 0).

    Args:
        scores: CUDA tensor ``[T, E]`` of ``torch.float32`` router logits, ``1 <= E <= 512``;
            contiguous, with a 16-byte-aligned data pointer. E = 64, 128 and 256 run
            specialised kernels in the default build (a build config can add any E up to
            512); other E a generic one.
        k: experts per token, an int with ``1 <= k <= min(32, E)``.
        scoring: ``"softmax"`` (the default) or ``"sigmoid"`` (DeepSeek-V3 style).
        renormalize: divide the `k` weights of each token by their sum (a bool, default True).
        out: optional ``(idx, weights)`` to write into instead of allocating: ``[T, k]``
            ``torch.int32`` and ``[T, k]`` ``torch.float32`` on the device of `scores`,
            contiguous, aligned, overlapping neither `scores` nor each other.

    Returns:
        ``(idx, weights)``: ``[T, k]`` ``torch.int32`` expert indices and ``[T, k]``
        ``torch.float32`` weights (the `out` tensors if given). With ``T == 0`` nothing is
        launched.

    Raises:
        TypeError: `scores` or `out` is not a tensor / pair of tensors, or has the wrong
            dtype; `k` is not an int; `scoring` is not a str; `renormalize` is not a bool.
        ValueError: `scores` is not 2-D; E is 0 or above 512; `k` is outside
            ``[1, min(32, E)]``; `scoring` is unknown; a tensor is not on a CUDA device (the
            same one), not contiguous or not 16-byte aligned; a dimension or element count
            reaches 2**31; `out` has a wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the scoring or the GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `scores`' device (as torch ops are);
    the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> logits = torch.randn(4096, 256, device="cuda")
        >>> idx, w = tileaot.topk_gate(logits, 8, scoring="sigmoid")  # [4096, 8] each
        >>> ref = torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :8]
        >>> assert torch.equal(idx.long(), ref)
        >>> p = torch.sigmoid(logits).gather(-1, ref)
        >>> torch.testing.assert_close(w, p / p.sum(-1, keepdim=True))
    """
    if (
        type(scores) is _arrays.Tensor
        and type(k) is int
        and type(renormalize) is bool
        and type(scoring) is str
        and scores.dim() == 2
        and 0 < k <= min(MAX_K, scores.shape[1])
        and scores.shape[1] <= MAX_EXPERTS
        and _arrays.plain_pair(out, 2)
    ):
        pair = out
        if pair is None:
            t = scores.shape[0]
            pair = scores.new_empty(t, k, dtype=_arrays._torch.int32), scores.new_empty(t, k)
        if _lib.fast((_OP, scoring), (scores, *pair), (1.0 if renormalize else 0.0,), _WRITES):
            return pair
    elif type(scores) is not _arrays.Tensor and _arrays.foreign(scores):
        return _arrays.call(topk_gate, locals())
    if type(k) is not int:
        k = _validate.integer("k", k)
    key = _KEYS.get(scoring) if type(scoring) is str else None
    if key is None:
        if not isinstance(scoring, str):
            raise TypeError(f"scoring must be a str, got {type(scoring).__name__}")
        raise ValueError(f"scoring must be 'softmax' or 'sigmoid'; got {scoring!r}")
    if type(renormalize) is not bool:
        raise TypeError(f"renormalize must be a bool, got {type(renormalize).__name__}")
    bound = SCHEMA.bind({"scores": scores}, K=k)
    e = bound.dims["E"]
    if not 0 < e <= MAX_EXPERTS:
        raise ValueError(f"scores has E = {e} experts; topk_gate supports 1 <= E <= {MAX_EXPERTS}")
    if not 0 < k <= min(MAX_K, e):
        raise ValueError(
            f"k must be in [1, {min(MAX_K, e)}] (at most {MAX_K} and E = {e}); got {k}"
        )
    idx, weights = SCHEMA.outputs(_arrays.namespace(scores), scores, bound, out, {"scores": scores})
    if bound.dims["T"] == 0:
        return idx, weights
    renorm = 1.0 if renormalize else 0.0
    handle = SCHEMA.launch(key, bound.device, (scores, idx, weights), (renorm,), bound.dims)
    if type(scores) is _arrays.Tensor:  # the short path passes (scores, idx, weights)
        _lib.learn((_OP, scoring), handle)
    return idx, weights


example_shapes = SCHEMA.example_shapes
