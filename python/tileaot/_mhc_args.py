"""Argument checks the mHC ops share beyond their schemas (one module they all import: no op
module imports another's checks)."""

from __future__ import annotations

import math
import numbers
from typing import Any

from . import _validate

_FLOAT32_MAX = 3.4028234663852886e38


def same_lead(name: str, t: Any, tail: int, like_name: str, like: Any, like_tail: int) -> None:
    """ValueError unless `t`'s leading dims (all but its last `tail`) equal `like`'s (the schema
    ties only their products)."""
    lead, want = tuple(t.shape[: t.dim() - tail]), tuple(like.shape[: like.dim() - like_tail])
    if lead != want:
        raise ValueError(
            f"{name} has leading dims {lead}; they must match {like_name}'s {want} "
            f"({name} shape {tuple(t.shape)}, {like_name} shape {tuple(like.shape)})"
        )


def check_mhc_mult(mhc_mult: Any) -> int:
    """`mhc_mult` as an int >= 1, else a TypeError/ValueError naming it."""
    if type(mhc_mult) is not int:
        mhc_mult = _validate.integer("mhc_mult", mhc_mult)
    if mhc_mult < 1:
        raise ValueError(f"mhc_mult must be >= 1; got {mhc_mult}")
    return mhc_mult


def float32_arg(name: str, value: Any) -> float:
    """`value` as a float that float32 holds finite (a kernel scalar), else a one-line
    TypeError/ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not (math.isfinite(value) and abs(value) <= _FLOAT32_MAX):
        raise ValueError(f"{name} must be finite in float32 (|{name}| <= 3.4e38), got {value}")
    return value


def mixes_width(name: str, k: int, r: int) -> None:
    """ValueError unless `name`'s last dim K is ``mhc_mult * (mhc_mult + 2)``."""
    if k != r * (r + 2):
        raise ValueError(
            f"{name} has {k} mixes per token; mhc_mult = {r} needs mhc_mult * (mhc_mult + 2) "
            f"= {r * (r + 2)} (pass the matching mhc_mult)"
        )


NORM_FN_MAX_N = 32  # mhc_pre_norm_fn's kernels unroll their mixes to 32 (as TileKernels pads)


def norm_fn_dims(op: str, dims: dict, residual: Any) -> None:
    """ValueError unless mhc_pre_norm_fn's (or its backward's) bound sizes are served: N <= 32
    mixes, R * H >= 1 values per token (a mean square of none is TileKernels' error too)."""
    if dims["N"] > NORM_FN_MAX_N:
        raise ValueError(f"mhc_fn has N = {dims['N']} rows; {op} supports N <= {NORM_FN_MAX_N}")
    if dims["R"] * dims["H"] == 0:
        raise ValueError(
            f"residual has shape {tuple(residual.shape)}: R * H = 0 values per token have no "
            "mean square; pass R, H >= 1"
        )


def fn_by_stream(mhc_fn: Any, residual: Any) -> Any:
    """`mhc_fn` as ``[N, R, H]`` for `residual`'s last two dims, or None where it is not
    ``[N, R * H]`` or ``[N, R, H]`` of them (a view: no copy)."""
    from . import _arrays

    r, h = residual.shape[-2:]
    if mhc_fn.dim() == 3 and tuple(mhc_fn.shape[1:]) == (r, h):
        return mhc_fn
    if mhc_fn.dim() == 2 and mhc_fn.shape[1] == r * h and mhc_fn.is_contiguous():
        if not isinstance(mhc_fn, _arrays.Tensor):  # an `Array` view has no reshape
            raise TypeError(
                "mhc_fn from another framework must be [N, R, H]: reshape it before the call"
            )
        return mhc_fn.view(mhc_fn.shape[0], r, h)
    return None


def fn_by_stream_checked(mhc_fn: Any, residual: Any) -> Any:
    """`fn_by_stream`, or a one-line ValueError where `mhc_fn` is neither layout."""
    fn = fn_by_stream(mhc_fn, residual)
    if fn is None:
        r, h = residual.shape[-2:]
        raise ValueError(
            f"mhc_fn has shape {tuple(mhc_fn.shape)}; it must be [N, R * H] = [N, {r * h}] or "
            f"[N, {r}, {h}] for residual shape {tuple(residual.shape)} (contiguous)"
        )
    return fn
