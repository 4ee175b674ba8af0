"""Argument checks sinkhorn_normalize and its backward share beyond their schemas (one module
both import, so neither op module imports the other's checks: no import circle)."""

from __future__ import annotations

import operator
from typing import Any

from . import _validate

MAX_N = 16  # the generic kernels serve N <= 16; N = 4 and 8 have specialised kernels
# Far above any useful count (Sinkhorn converges in tens); keeps the kernels' int32 loop
# arithmetic (ceil-divisions of repeat) away from overflow.
MAX_REPEAT = 1 << 16
_INF = float("inf")


def check_args(name: str, n: int, repeat: Any, eps: Any) -> tuple[int, float]:
    """What the schemas do not check: N (bound from `name`) <= 16, and the scalars; returns
    (repeat, eps) of a valid call, else raises."""
    if n > MAX_N:
        raise ValueError(f"{name} has N = {n}; sinkhorn_normalize supports N <= {MAX_N}")
    if type(repeat) is not int:
        if isinstance(repeat, bool):
            raise TypeError("repeat must be an int, got bool")
        try:
            repeat = operator.index(repeat)
        except TypeError:
            raise TypeError(f"repeat must be an int, got {type(repeat).__name__}") from None
    if not 1 <= repeat <= MAX_REPEAT:
        raise ValueError(f"repeat must be in [1, {MAX_REPEAT}]; got {repeat}")
    if type(eps) is not float or not 0.0 <= eps < _INF:
        eps = _validate.nonneg_float("eps", eps)
    return repeat, eps
