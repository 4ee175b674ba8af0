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
