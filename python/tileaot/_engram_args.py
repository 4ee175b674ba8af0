"""Argument checks engram_gate and its backward share (one module both import, so neither op
module imports the other's checks: no import circle)."""

from __future__ import annotations

import math
from typing import Any

from . import _validate

_INF = float("inf")
_INPUTS = ("h", "k", "v", "w_h", "w_k")


def check_inputs(h: Any, k: Any, v: Any, w_h: Any, w_k: Any, eps: Any):
    """Shared by forward and backward: shapes, memory and eps (dtypes are checked before).

    Returns ``(rows, H, v_rows, device, eps)``: v_rows is rows unless v is shared.
    """
    if type(eps) is not float or not 0.0 <= eps < _INF:
        eps = _validate.nonneg_float("eps", eps)
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
    for name, t in (("w_h", w_h), ("w_k", w_k)):
        if t.shape != (n,):
            raise ValueError(
                f"{name} must have shape ({n},) to match h {tuple(shape)}; got {tuple(t.shape)}"
            )
    device = _validate.check_memory(_INPUTS, (h, k, v, w_h, w_k))
    return h.numel() // n, n, v_rows, device, eps


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
