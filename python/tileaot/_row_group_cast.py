"""The call path the 2-D FP8 casts with 128-row scale groups share (per_block_cast_fp8,
per_channel_cast_fp8): ``x[M, N] -> (q[M, N] e4m3, scale[ceil(M/128), C] fp32)`` with a
runtime ``round_sf``. Only the scale's columns C differ (``ceil(N/128)`` or ``N``).

The kernels' grids have one row per 128-row group, and gridDim.y stops at 65535: taller
inputs are cut into launches of ``ROWS_PER_LAUNCH`` rows (whole groups, by pointer offsets).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _arrays, _lib

if TYPE_CHECKING:
    from ._schema import OpSchema

ROWS = 128  # rows of x sharing a scale
ROWS_PER_LAUNCH = 65535 * ROWS
ROUND_SF = {False: (0.0,), True: (1.0,)}  # the kernels' runtime scalar round_sf


def cast(
    public: Callable[..., Any],
    schema: OpSchema,
    scale_cols: Callable[[int], int],
    x: Any,
    round_sf: bool,
    out: Any,
) -> Any:
    """Run `public`'s op (its `schema`) on `x`: the short path, else checks and launches.

    `scale_cols(N)`: the scale's columns, for the short path's allocation (the checked path
    takes them from the schema)."""
    op = schema.op
    if (
        type(x) is _arrays.Tensor
        and x.dim() == 2
        and x.shape[0] <= ROWS_PER_LAUNCH
        and type(round_sf) is bool
        and _arrays.plain_pair(out, 2)
    ):
        pair = out
        if pair is None:
            m, n = x.shape
            torch = _arrays._torch
            pair = (
                x.new_empty(m, n, dtype=torch.float8_e4m3fn),
                x.new_empty(-(-m // ROWS), scale_cols(n), dtype=torch.float32),
            )
        if _lib.fast((op, x.dtype), (x, *pair), ROUND_SF[round_sf], schema.writes):
            return pair
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(public, {"x": x, "round_sf": round_sf, "out": out})
    bound = schema.bind({"x": x})
    if type(round_sf) is not bool:
        raise TypeError(f"round_sf must be True or False; got {type(round_sf).__name__}")
    q, scale = schema.outputs(_arrays.namespace(x), x, bound, out, {"x": x})
    m, n = bound.dims["M"], bound.dims["N"]
    if m == 0 or n == 0:
        return q, scale
    if m <= ROWS_PER_LAUNCH:
        handle = schema.launch(
            bound.picked["T"], bound.device, (x, q, scale), ROUND_SF[round_sf], bound.dims
        )
        if type(x) is _arrays.Tensor:  # one launch over (x, q, scale): what the short path passes
            _lib.learn((op, x.dtype), handle)
        return q, scale
    # Row slices of whole scale groups, by pointer offsets (DLPack views cannot be sliced).
    handle = _lib.handle(op, bound.picked["T"])
    stream, native = _lib.current_stream(bound.device), _lib.native()
    x_ptr, q_ptr, s_ptr = x.data_ptr(), q.data_ptr(), scale.data_ptr()
    row_bytes, scale_row_bytes = n * x.element_size(), scale.shape[1] * 4
    for r0 in range(0, m, ROWS_PER_LAUNCH):
        ptrs = (x_ptr + r0 * row_bytes, q_ptr + r0 * n, s_ptr + r0 // ROWS * scale_row_bytes)
        shapes = schema.flat({**bound.dims, "M": min(m - r0, ROWS_PER_LAUNCH)})
        native.launch(handle, bound.device, stream, ptrs, shapes, ROUND_SF[round_sf])
    return q, scale
