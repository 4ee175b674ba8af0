"""Argument checks engram_gate and its backward share (one module both import, so neither op
module imports the other's checks: no import circle)."""

from __future__ import annotations

import math
from typing import Any

from . import _validate

_INF = float("inf")
_INPUTS = ("h", "k", "v", "w_h", "w_k")


def check_shapes(h: Any, k: Any, v: Any, w_h: Any, w_k: Any, eps: Any, clamp: Any):
    """Shared by forward and backward: how the shapes relate, eps and clamp_value (dtypes are
    checked before; the ops' schemas check memory).

    Returns ``(rows, H, v_rows, w_rows, eps, clamp)``: v_rows is rows unless v is shared;
    w_rows is G for per-branch weights ``[G, H]``, 1 for shared ones ``(H,)``.
    """
    if type(eps) is not float or not 0.0 <= eps < _INF:
        eps = _validate.nonneg_float("eps", eps)
    if type(clamp) is not float or not 0.0 <= clamp < _INF:
        clamp = _validate.nonneg_float("clamp_value", clamp)
    shape = h.shape
    if not shape:
        raise ValueError("h must have shape (..., H); got a 0-d tensor")
    n = shape[-1]
    if n == 0:
        raise ValueError(
            f"h has shape {tuple(shape)}: H (the last dim) must be >= 1, the gate of an empty "
            "row is undefined"
        )
    if k.shape != shape:
        raise ValueError(f"k must have the shape of h {tuple(shape)}; got {tuple(k.shape)}")
    v_rows = _value_rows(shape, v.shape)
    per_branch = tuple(shape[-2:]) if len(shape) >= 2 else None
    if tuple(w_h.shape) not in ((n,), per_branch):
        what = f"{per_branch} (one row per branch) or ({n},)" if per_branch else f"({n},)"
        raise ValueError(
            f"w_h must have shape {what} to match h {tuple(shape)}; got {tuple(w_h.shape)}"
        )
    if w_k.shape != w_h.shape:
        raise ValueError(
            f"w_k must have the shape of w_h {tuple(w_h.shape)}; got {tuple(w_k.shape)}"
        )
    w_rows = 1 if w_h.dim() == 1 else shape[-2]
    return h.numel() // n, n, v_rows, w_rows, eps, clamp


def _value_rows(shape: tuple, v_shape: tuple) -> int:
    """Rows of v: h's rows, or one per run of ``shape[-2]`` rows when v is shared."""
    rows = math.prod(v_shape[:-1])
    if v_shape == shape:
        return rows
    if len(shape) < 2:
        raise ValueError(f"v must have the shape of h {tuple(shape)}; got {tuple(v_shape)}")
    shared = (*shape[:-2], 1, shape[-1])
    if tuple(v_shape) == shared:
        return rows
    raise ValueError(
        f"v must have the shape of h {tuple(shape)} or {shared} (one row shared by the "
        f"{shape[-2]} rows of h.shape[-2]); got {tuple(v_shape)}"
    )
