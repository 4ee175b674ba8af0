"""SwiGLU backward on FP8 e4m3 activations with per-row routing weights (op "swiglu_backward"):
TileKernels 1.0.0's ``tile_kernels.torch.swiglu_backward``."""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

from . import _arrays
from ._schema import OpSchema, short_of

if TYPE_CHECKING:
    import torch

_OP = "swiglu_backward"
GROUPS = (32, 128)  # columns of x per scale (TileKernels' num_per_channels)
_INF = float("inf")  # the kernel's "no clamp" limit: no value compares above it
_FLT_MAX = 3.4028234663852886e38


def _by_key(key: str) -> dict[str, int | str]:
    """A key "fp32,g128" fixes the out dtype and x_sf's columns (2H / 128); the out dtype
    alone (torch's fake: the group changes no output) fixes the dtype."""
    out, _, group = key.partition(",")
    return {"O": out, "NS": f"2 * H // {group[1:]}"} if group else {"O": out}


def _key_of(args: dict) -> str:
    out_dtype = args.get("out_dtype")
    return "fp32" if out_dtype is None else short_of(out_dtype)


SCHEMA = OpSchema(
    _OP,
    "x[M, 2*H]: e4m3, x_sf[M, NS]: fp32, grad_out[M, H]: bf16, weight[T, K]: fp32,"
    " pos_to_token_topk[M]: i32, token_topk_to_pos[T, K]: i32"
    " -> out[M, H]: O, x_grad[M, 2*H]: O, weight_grad[T, K]: fp32; swiglu_clamp_value: float32",
    dtypes={"O": ("fp32", "bf16")},
    key="{O},{group}",
    keyed=_by_key,
    key_of=_key_of,
    example={"M": 4096 * 8, "H": 2048, "T": 4096, "K": 8},
)


def swiglu_backward(
    x: torch.Tensor,
    x_sf: torch.Tensor,
    grad_out: torch.Tensor,
    weight: torch.Tensor,
    pos_to_token_topk: torch.Tensor,
    token_topk_to_pos: torch.Tensor,
    swiglu_clamp_value: float | None = None,
    *,
    out_dtype: torch.dtype | None = None,
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward of the weighted SwiGLU of a fused MoE layout, from its FP8 input.

    TileKernels 1.0.0's ``tile_kernels.torch.swiglu_backward((x, x_sf), grad_out, weight,
    pos_to_token_topk, token_topk_to_pos, num_per_channels, swiglu_clamp_value)``, with
    ``num_per_channels = 2H / x_sf.shape[1]`` (32 or 128). Row ``i`` of `x` holds the gate
    (first ``H`` columns) and the up projection of an expanded token; its routing weight is
    ``w = weight.view(-1)[pos_to_token_topk[i]]``, 0 for a negative position (a padding row).
    In float32, element by element (``c`` = `swiglu_clamp_value`)::

        g = float(x[i, j]) * x_sf[i, j // P];  u = float(x[i, H + j]) * x_sf[i, (H + j) // P]
        cg = g > c;  cu = u > c or u < -c            # clamped (only with a clamp value)
        g = min(g, c);  u = min(max(u, -c), c)
        s = 1 / (1 + exp(-g))
        a = g / (1 + exp(-g)) * u                    # the forward activation
        out[i, j]        = a * w
        x_grad[i, j]     = 0 if cg else grad_out[i, j] * w * s * u * fma(g, 1 - s, 1)
        x_grad[i, H + j] = 0 if cu else grad_out[i, j] * w * s * g
        weight_grad.view(-1)[pos_to_token_topk[i]] = sum_j grad_out[i, j] * a[i, j]

    every operation rounded to nearest even in that order (``exp`` the accurate one, the
    ``fma`` rounded once, as TileKernels' reference asks of ``torch.compile``), so `out` and
    `x_grad` equal its reference bit for bit on a CUDA device; ``weight_grad`` is a float32
    sum in another order (within TileKernels' 1e-4 test bound). Entries of ``weight_grad``
    that no row is routed from are 0.

    Args:
        x: CUDA tensor ``[M, 2H]`` ``torch.float8_e4m3fn`` (e.g. `per_token_cast_fp8` of the
            forward input with ``group_size`` P); ``H % P == 0``.
        x_sf: ``[M, 2H / P]`` ``torch.float32`` scales, ``P`` 32 or 128.
        grad_out: ``[M, H]`` ``torch.bfloat16`` gradient of `out`.
        weight: ``[T, K]`` ``torch.float32`` routing weights.
        pos_to_token_topk: ``[M]`` ``torch.int32``: ``t * K + k`` of each row, -1 for padding.
        token_topk_to_pos: ``[T, K]`` ``torch.int32``: the row of each ``(t, k)``, -1 where
            the pair was not routed; the inverse of `pos_to_token_topk` (as TileKernels'
            ``get_fused_mapping`` returns both). Positions are not checked on the host (a
            sync): a row whose position is outside ``[0, T * K)`` is treated as padding; a
            mapping that is not one inverse of the other leaves some ``weight_grad`` entries
            unwritten or written twice.
        swiglu_clamp_value: None (no clamp) or a finite limit ``>= 0``.
        out_dtype: dtype of `out` and `x_grad`: ``torch.float32`` (None: TileKernels'
            reference) or ``torch.bfloat16`` (its fused kernel's: one rounding of the same
            values).
        out: optional ``(out, x_grad, weight_grad)`` to write into: shapes and dtypes as
            returned, same device, contiguous, aligned, not overlapping the inputs.

    All tensors contiguous, 16-byte aligned, on one CUDA device.

    Returns:
        ``(out, x_grad, weight_grad)`` (TileKernels' order): ``[M, H]`` and ``[M, 2H]`` of
        `out_dtype`, ``[T, K]`` float32. With ``M == 0`` nothing is launched and
        ``weight_grad`` is zero-filled by torch.

    Raises:
        TypeError: a tensor argument is not a tensor or has the wrong dtype; `out_dtype` is
            not one of the two; `swiglu_clamp_value` is not a real number.
        ValueError: a tensor has the wrong rank or a shape that disagrees (``x_sf`` columns
            not ``2H / 32`` or ``2H / 128``, ``H`` not a multiple of P); the clamp value is not
            finite and >= 0; a tensor is not on a CUDA device (the same one), not
            contiguous or not 16-byte aligned; a size reaches 2**31; `out` is wrong or
            overlaps an input.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the key or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    Two kernels (unrouted weight gradients zeroed, then one block per row), enqueued on torch's
    current stream of `x`'s device; the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example (TileKernels' mapping and FP8 cast):
        >>> import torch, tileaot, tile_kernels
        >>> idx = torch.randint(0, 64, (512, 8), device="cuda")
        >>> _, p2t, p2tk, tk2p, *_ = tile_kernels.moe.get_fused_mapping(idx, 64, 0, 128)
        >>> h = torch.randn(512, 2 * 2048, dtype=torch.bfloat16, device="cuda")
        >>> x, x_sf = tileaot.per_token_cast_fp8(tileaot.expand_to_fused(h, tk2p, p2t * 0))
        >>> w = torch.rand(512, 8, device="cuda")
        >>> dy = torch.randn(x.shape[0], 2048, dtype=torch.bfloat16, device="cuda")
        >>> out, x_grad, w_grad = tileaot.swiglu_backward(x, x_sf, dy, w, p2tk, tk2p)
    """
    if type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(swiglu_backward, locals())
    inputs = {
        "x": x,
        "x_sf": x_sf,
        "grad_out": grad_out,
        "weight": weight,
        "pos_to_token_topk": pos_to_token_topk,
        "token_topk_to_pos": token_topk_to_pos,
    }
    bound = SCHEMA.bind(inputs)
    fw = _arrays.namespace(x)
    limit = _INF if swiglu_clamp_value is None else _check_clamp(swiglu_clamp_value)
    if out_dtype is None:
        out_dtype = fw.float32
    if out_dtype not in (fw.float32, fw.bfloat16):
        raise TypeError(
            f"out_dtype must be torch.float32 or torch.bfloat16 (or None); got {out_dtype!r}"
        )
    h, ns = bound.dims["H"], bound.dims["NS"]
    group = _group(h, ns)
    key = f"{short_of(out_dtype)},g{group}"
    SCHEMA.fix(bound, key)
    result = list(SCHEMA.outputs(fw, x, bound, out, inputs))
    if bound.dims["M"] == 0 or h == 0:
        result[2].zero_()
        return tuple(result)
    returned = tuple(result)
    if bound.dims["T"] * bound.dims["K"] == 0:  # no pair to read or write (every row is
        weight = token_topk_to_pos = result[2] = x  # padding): x stands in for the empty ones
    tensors = (x, x_sf, grad_out, weight, pos_to_token_topk, token_topk_to_pos, *result)
    SCHEMA.launch(key, bound.device, tensors, (limit,), bound.dims)
    return returned


def _group(h: int, ns: int) -> int:
    """The scale group P from x's 2H columns and x_sf's NS: 32 or 128, dividing H."""
    for p in GROUPS:
        if ns * p == 2 * h and h % p == 0:
            return p
    if h == 0 and ns == 0:
        return GROUPS[-1]
    raise ValueError(
        f"x_sf must be [M, 2H / 32] or [M, 2H / 128] with H a multiple of that group; x has "
        f"2H = {2 * h} columns and x_sf {ns}: cast x with group_size 32 or 128"
    )


def _check_clamp(value: Any) -> float:
    """`swiglu_clamp_value` as a float the kernel receives unchanged."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"swiglu_clamp_value must be a real number or None, got {type(value).__name__}"
        )
    value = float(value)
    if not (0 <= value <= _FLT_MAX):
        raise ValueError(
            f"swiglu_clamp_value must be >= 0 and finite in float32, or None for no clamp; "
            f"got {value}"
        )
    return value


example_shapes = SCHEMA.example_shapes
