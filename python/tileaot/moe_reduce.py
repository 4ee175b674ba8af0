"""MoE combine: each token's expert outputs summed back into its row (op "moe_reduce")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _lib, _validate
from .moe_expand import _dtype

if TYPE_CHECKING:
    import torch

_OP = "moe_reduce"
_SHORT = {"torch.bfloat16": "bf16", "torch.float32": "fp32", "bfloat16": "bf16", "float32": "fp32"}
_KEYS: dict[tuple[Any, Any, bool], str] = {}  # (y dtype, out dtype, weighted) -> dispatch key
# `_lib.fast`: tensors (y_sorted, token_pos, out), or (y_sorted, token_pos, weights, out)
_WRITES_OUT = {False: 0b100, True: 0b1000}


def moe_reduce(
    y_sorted: torch.Tensor,
    token_pos: torch.Tensor,
    weights: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Combine expert outputs: ``out[t] = sum_j weights[t, j] * y_sorted[token_pos[t, j]]``.

    The inverse of `tileaot.moe_expand`'s gather: each token sums the rows its slots were sent
    to (after the experts ran on them), weighted by the router weights, or a plain sum when
    `weights` is None. Slots with ``token_pos[t, j] == -1`` (dropped) are skipped; a token with
    no live slot gets a zero row. Accumulation is float32 in slot order, as TileKernels'
    ``reduce_fused``: a weighted slot is one fused multiply-add ``acc = fma(y, w, acc)``
    (rounded once), an unweighted one an add; one final rounding to `out_dtype`. Each needed row of
    `y_sorted` is read once and `out` written once.

    Args:
        y_sorted: CUDA tensor ``[P, H]``, ``torch.bfloat16`` or ``torch.float32``; contiguous,
            16-byte-aligned (e.g. the expert outputs for `moe_expand`'s ``x_sorted``).
        token_pos: ``[T, K]`` ``torch.int32`` row of `y_sorted` for each (token, slot), same
            device, contiguous, aligned (`moe_expand` returns it). Values are not checked on
            the host (that would need a sync): they must be in ``[-1, P)``; any value outside
            ``[0, P)`` is skipped like -1, never read.
        weights: optional ``[T, K]`` ``torch.float32`` weight of each slot (e.g. the router's
            top-k probabilities); None sums the rows unweighted.
        out_dtype: ``torch.bfloat16`` or ``torch.float32``; default: the dtype of `out` if
            given, else of `y_sorted`.
        out: optional ``[T, H]`` tensor to write into: dtype `out_dtype`, same device,
            contiguous, aligned, not overlapping the inputs.

    Returns:
        `out`, ``[T, H]`` of `out_dtype`. Nothing is launched when ``T == 0`` or ``H == 0``;
        with ``K == 0`` or ``P == 0`` (no row can be read) `out` is zero-filled by torch.

    Raises:
        TypeError: a tensor argument is not a tensor or has the wrong dtype; `out_dtype` is
            not one of the two; `out` has a dtype other than `out_dtype`.
        ValueError: a tensor is not 2-D; `token_pos` and `weights` shapes differ or `y_sorted`
            and `out` disagree on H / T; a tensor is not on a CUDA device (the same one), not
            contiguous or not 16-byte aligned; a size reaches 2**31; `out` overlaps an input.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtypes or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `y_sorted`'s device; the call returns
    without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(4096, 7168, dtype=torch.bfloat16, device="cuda")
        >>> probs, idx = torch.randn(4096, 256, device="cuda").softmax(-1).topk(8)
        >>> xs, offsets, pos, _ = tileaot.moe_expand(x, idx.int(), 256)
        >>> ys = xs  # run the experts on xs here (a grouped GEMM over offsets)
        >>> y = tileaot.moe_reduce(ys, pos, probs)  # [4096, 7168] bf16, = x * probs.sum(-1)
    """
    if (
        type(y_sorted) is _arrays.Tensor
        and type(token_pos) is _arrays.Tensor
        and (weights is None or type(weights) is _arrays.Tensor and weights.dim() == 2)
        and (out_dtype is None or type(out_dtype) is type(y_sorted.dtype))
        and (out is None or type(out) is _arrays.Tensor)
        and y_sorted.dim() == 2 == token_pos.dim()
    ):
        result = _fast(y_sorted, token_pos, weights, out_dtype, out)
        if result is not None:
            return result
    elif type(y_sorted) is not _arrays.Tensor and _arrays.foreign(y_sorted):
        return _arrays.call(moe_reduce, locals())
    fw = _arrays.namespace(y_sorted)
    floats = (fw.bfloat16, fw.float32)
    y_dtype = _dtype(y_sorted, "y_sorted", floats)
    _dtype(token_pos, "token_pos", (fw.int32,))
    if out_dtype is None:
        out_dtype = out.dtype if isinstance(out, fw.Tensor) else y_dtype
        if out_dtype not in floats:  # out's own dtype, which nothing below checks
            raise TypeError(
                f"out has dtype {out_dtype}; moe_reduce writes torch.bfloat16 or torch.float32"
            )
    elif out_dtype not in floats:
        raise TypeError(
            f"out_dtype must be torch.bfloat16 or torch.float32 (or None); got {out_dtype!r}"
        )
    if y_sorted.dim() != 2 or token_pos.dim() != 2:
        raise ValueError(
            f"y_sorted must be [P, H] and token_pos [T, K]; got y_sorted "
            f"{tuple(y_sorted.shape)}, token_pos {tuple(token_pos.shape)}"
        )
    p, h = y_sorted.shape
    t, k = token_pos.shape
    weighted = weights is not None
    if weighted:
        _dtype(weights, "weights", (fw.float32,))
        if weights.shape != token_pos.shape:
            raise ValueError(
                f"weights must have the shape of token_pos {tuple(token_pos.shape)}; got "
                f"{tuple(weights.shape)}"
            )
        names, inputs = ("y_sorted", "token_pos", "weights"), (y_sorted, token_pos, weights)
    else:
        names, inputs = ("y_sorted", "token_pos"), (y_sorted, token_pos)
    device = _validate.check_memory(names, inputs)
    if out is None:
        _validate.check_size("out", (t, h))
        result = y_sorted.new_empty(t, h, dtype=out_dtype)
    else:
        _validate.check_out("out", out, out_dtype, (t, h), device)
        _validate.check_no_overlap(("out",), (out,), names, inputs)
        result = out
    if t == 0 or h == 0:
        return result
    if k == 0 or p == 0:
        return result.zero_()
    key = _KEYS.get((y_dtype, out_dtype, weighted))
    if key is None:
        mode = "weighted" if weighted else "sum"
        key = _KEYS[(y_dtype, out_dtype, weighted)] = (
            f"{_SHORT[str(y_dtype)]},{_SHORT[str(out_dtype)]},{mode}"
        )
    if weighted:
        ptrs = (y_sorted.data_ptr(), token_pos.data_ptr(), weights.data_ptr(), result.data_ptr())
        shapes = (p, h, t, k, t, k, t, h)
    else:
        ptrs = (y_sorted.data_ptr(), token_pos.data_ptr(), result.data_ptr())
        shapes = (p, h, t, k, t, h)
    handle = _lib.handle(_OP, key)
    _lib.native().launch(handle, device, _lib.current_stream(device), ptrs, shapes, ())
    if type(y_sorted) is _arrays.Tensor:  # launched what `_fast` passes: these shapes
        _lib.learn((_OP, y_dtype, out_dtype, weighted), handle)
    return result


def _fast(y_sorted, token_pos, weights, out_dtype, out):
    """The short path for plain torch tensors of the right ranks: the result, or None if
    `_lib.fast` declined (the checked path then runs). `out_dtype` defaults as there."""
    t, h = token_pos.shape[0], y_sorted.shape[1]
    if out is None:
        if t * h >= _validate.INT32_LIMIT:  # the checked path's error, not torch's OOM
            return None
        dt = y_sorted.dtype if out_dtype is None else out_dtype
        out = y_sorted.new_empty(t, h, dtype=dt)
    else:
        dt = out.dtype if out_dtype is None else out_dtype
    weighted = weights is not None
    tensors = (y_sorted, token_pos, weights, out) if weighted else (y_sorted, token_pos, out)
    if _lib.fast((_OP, y_sorted.dtype, dt, weighted), tensors, (), _WRITES_OUT[weighted]):
        return out
    return None


def example_shapes(key: str) -> tuple[str, tuple[int, ...]]:
    """A typical call for `python -m tileaot info`: its description and flat shapes."""
    p, h, t, k = 4096 * 8 + 256 * 15, 7168, 4096, 8
    if key.endswith(",weighted"):
        return "y_sorted[36608, 7168], token_pos/weights[4096, 8]", (p, h, t, k, t, k, t, h)
    return "y_sorted[36608, 7168], token_pos[4096, 8]", (p, h, t, k, t, h)
