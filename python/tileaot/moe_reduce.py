"""MoE combine: each token's expert outputs summed back into its row (op "moe_reduce")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _lib, _validate
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "moe_reduce"
SCHEMA = OpSchema(
    _OP,
    "y_sorted[P, H]: Y, token_pos[T, K]: i32, weights?[T, K]: fp32 -> out[T, H]: O",
    dtypes={"Y": ("bf16", "fp32"), "O": ("bf16", "fp32")},
    fields={"Y": "dtype", "O": "out_dtype"},
    key="{Y},{O},{mode}",
    select={"weights": ("mode", "weighted", "sum")},
    public={"O": ("out_dtype", "Y")},
    example={"P": 4096 * 8 + 256 * 15, "H": 7168, "T": 4096, "K": 8},
)
_SHORT = {"torch.bfloat16": "bf16", "torch.float32": "fp32", "bfloat16": "bf16", "float32": "fp32"}
_KEYS: dict[tuple[Any, Any, bool], str] = {}  # (y dtype, out dtype, weighted) -> dispatch key
# The short path's output bits, by `weights is not None`: tensors (y_sorted, token_pos, out)
# or (y_sorted, token_pos, weights, out).
_WRITES_OUT = {False: SCHEMA.writes_of(), True: SCHEMA.writes_of(frozenset({"weights"}))}


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
    inputs = {"y_sorted": y_sorted, "token_pos": token_pos, "weights": weights}
    bound = SCHEMA.bind(inputs)
    y_dtype = y_sorted.dtype
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
    bound.picked["O"] = _SHORT[str(out_dtype)]
    (result,) = SCHEMA.outputs(fw, y_sorted, bound, out, inputs)
    dims = bound.dims
    if dims["T"] == 0 or dims["H"] == 0:
        return result
    if dims["K"] == 0 or dims["P"] == 0:
        return result.zero_()
    weighted = weights is not None
    key = _KEYS.get((y_dtype, out_dtype, weighted))
    if key is None:
        mode = "weighted" if weighted else "sum"
        key = _KEYS[(y_dtype, out_dtype, weighted)] = (
            f"{_SHORT[str(y_dtype)]},{_SHORT[str(out_dtype)]},{mode}"
        )
    tensors = (y_sorted, token_pos, weights, result)
    handle = SCHEMA.launch(key, bound.device, tensors, (), dims)
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


example_shapes = SCHEMA.example_shapes
