"""Top-k expert gate for mixture-of-experts routing (op "topk_gate")."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

from . import _arrays, _lib, _validate

if TYPE_CHECKING:
    import torch

_OP = "topk_gate"
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
        if _lib.fast((_OP, scoring), (scores, *pair), (1.0 if renormalize else 0.0,), 0b110):
            return pair
    elif type(scores) is not _arrays.Tensor and _arrays.foreign(scores):
        return _arrays.call(topk_gate, locals())
    fw = _arrays.namespace(scores)
    _validate.dtype_key("scores", scores, ("fp32",))
    if scores.dim() != 2:
        raise ValueError(f"scores must be 2-D [T, E]; got shape {tuple(scores.shape)}")
    t, e = scores.shape
    if type(k) is not int:
        k = _int("k", k)
    key = _KEYS.get(scoring) if type(scoring) is str else None
    if key is None:
        if not isinstance(scoring, str):
            raise TypeError(f"scoring must be a str, got {type(scoring).__name__}")
        raise ValueError(f"scoring must be 'softmax' or 'sigmoid'; got {scoring!r}")
    if type(renormalize) is not bool:
        raise TypeError(f"renormalize must be a bool, got {type(renormalize).__name__}")
    if not 0 < e <= MAX_EXPERTS:
        raise ValueError(f"scores has E = {e} experts; topk_gate supports 1 <= E <= {MAX_EXPERTS}")
    if not 0 < k <= min(MAX_K, e):
        raise ValueError(
            f"k must be in [1, {min(MAX_K, e)}] (at most {MAX_K} and E = {e}); got {k}"
        )
    device = _validate.check_memory(("scores",), (scores,))
    if out is None:
        idx = scores.new_empty(t, k, dtype=fw.int32)
        weights = scores.new_empty(t, k)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(
                f"out must be an (idx, weights) pair of tensors; got {type(out).__name__}"
            )
        idx, weights = out
        _validate.check_out("out[0] (idx)", idx, fw.int32, (t, k), device)
        _validate.check_out("out[1] (weights)", weights, fw.float32, (t, k), device)
        _validate.check_no_overlap(
            ("out[0] (idx)", "out[1] (weights)"), (idx, weights), ("scores",), (scores,)
        )
    if t == 0:
        return idx, weights
    handle = _lib.handle(_OP, key)
    _lib.native().launch(
        handle,
        device,
        _lib.current_stream(device),
        (scores.data_ptr(), idx.data_ptr(), weights.data_ptr()),
        (t, e, t, k, t, k),
        (1.0 if renormalize else 0.0,),
    )
    if type(scores) is _arrays.Tensor:  # the short path passes (scores, idx, weights)
        _lib.learn((_OP, scoring), handle)
    return idx, weights


def _int(name: str, value: object) -> int:
    """`value` as an int: TypeError for bools, floats, None and the like."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None


def example_shapes(key: str) -> tuple[str, tuple[int, ...]]:
    """A typical call for `python -m tileaot info`: its description and flat shapes."""
    return "scores[4096, 256], k=8", (4096, 256, 4096, 8, 4096, 8)
