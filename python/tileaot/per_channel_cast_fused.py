"""Per-channel FP8 cast of rows gathered by an index, FP8 rows optionally cast back first (op
"per_channel_cast_fused"): TileKernels' ``per_channel_cast_fused``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _row_group_cast
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "per_channel_cast_fused"
ROWS = _row_group_cast.ROWS  # rows of the output sharing a scale, in each column
GROUP = 128  # e4m3 x: columns per x_sf entry
SCHEMA = OpSchema(
    _OP,
    f"x[T, N]: X, x_sf?[T, N // {GROUP}]: fp32, pos_to_token[P]: i32"
    f" -> q[P, N]: e4m3, scale[(P + {ROWS - 1}) // {ROWS}, N]: fp32; round_sf: int32",
    dtypes={"X": ("bf16", "fp16", "fp32", "e4m3")},
    fields={"X": "dtype"},
    key="{X}",
    select={"x_sf": ("X", "e4m3", None)},
    example={"T": 4096, "N": 7168, "P": 34816},
)


def per_channel_cast_fused(
    x: torch.Tensor,
    pos_to_token: torch.Tensor,
    *,
    x_sf: torch.Tensor | None = None,
    round_sf: bool = False,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather rows of `x` by `pos_to_token` and quantise them to FP8 E4M3 with one float32
    scale per column of every 128 rows (TileKernels 1.0.0's ``per_channel_cast_fused(x,
    "e4m3", 128, round_sf, num_per_channels, pos_to_token)``), bit for bit.

    Row ``p`` of the cast matrix ``v`` is ``x[pos_to_token[p]]``, or zeros where
    ``pos_to_token[p] < 0`` (a padding row of TileKernels' fused MoE layout; an index ``>= T``
    also gives zeros, TileKernels assumes none). With FP8 `x` (TileKernels' QuantTensor input
    ``(x, x_sf)`` with ``num_per_channels=128``) the rows are cast back first: ``v[p, c] =
    float(x[t, c]) * x_sf[t, c // 128]`` in float32. Then `v` is cast as
    `tileaot.per_channel_cast_fp8` casts it: per column ``j`` and group of 128 rows, ``amax =
    max(amax(|v[rows, j]|), 1e-4)``, ``scale = amax / 448`` (``round_sf=True``: rounded up to a
    power of two) and ``q = v * (448 / amax)`` (``round_sf=True``: ``* (1 / scale)``), rounded
    to nearest even into ``torch.float8_e4m3fn``, saturating at ±448. For finite inputs the
    result equals, bit for bit, ``kernels_py.quant.per_channel_cast_fused.reference`` and
    TileKernels' ``tile_kernels.torch.per_channel_cast_fused``; non-finite elements give
    unspecified results. (Without an index, `tileaot.per_channel_cast_fp8` is this cast.)

    Args:
        x: CUDA tensor ``[T, N]``, ``torch.bfloat16``, ``torch.float16``, ``torch.float32``
            (any N; the fast path needs 16-byte rows) or ``torch.float8_e4m3fn`` (with
            `x_sf`; ``N % 128 == 0``); contiguous, 16-byte aligned.
        pos_to_token: ``[P]`` ``torch.int32`` source row of each output row, negative for a
            zero row (TileKernels' ``get_fused_mapping`` returns it); same device, contiguous,
            aligned. Any P (TileKernels asks ``P % 16 == 0``) up to 65535 * 128 rows.
        x_sf: ``[T, N // 128]`` ``torch.float32`` scales of FP8 `x` (``x[t, c]`` means
            ``x[t, c] * x_sf[t, c // 128]``); required with FP8 `x`, None otherwise.
        round_sf: power-of-two scales (``2^ceil(log2(amax / 448))``); default False.
        out: optional ``(q, scale)`` to write into instead of allocating, with exactly the
            shapes and dtypes below, on the device of `x`, contiguous, 16-byte aligned, not
            overlapping the inputs or each other.

    Returns:
        ``(q, scale)``: `q` ``[P, N]`` ``torch.float8_e4m3fn``; `scale` ``[ceil(P / 128), N]``
        ``torch.float32``. If `q` has no elements nothing is launched.

    Raises:
        TypeError: a tensor argument is not a tensor or has an unsupported dtype; `round_sf`
            is not a bool; `out` is not a pair of tensors, or has a wrong dtype.
        ValueError: a tensor has the wrong rank; FP8 `x` without `x_sf`, with ``N % 128 !=
            0`` or a wrongly shaped `x_sf`; other `x` with `x_sf`; P past 65535 * 128; a
            tensor is not on a CUDA device (the same one), not contiguous or not 16-byte
            aligned; a dimension or element count reaches 2**31; `out` has a wrong shape or
            overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    One kernel, enqueued on torch's current stream of `x`'s device; the call returns without
    synchronising. Arrays of other frameworks (CuPy, ... via DLPack) work too; see
    `tileaot.use_stream`.

    Example (the index from TileKernels' ``get_fused_mapping``):
        >>> import torch, tileaot, tile_kernels
        >>> x = torch.randn(4096, 7168, dtype=torch.bfloat16, device="cuda")
        >>> idx = torch.randint(0, 256, (4096, 8), device="cuda")
        >>> _, pos_to_token, *_ = tile_kernels.moe.get_fused_mapping(idx, 256, 0, 128)
        >>> q, scale = tileaot.per_channel_cast_fused(x, pos_to_token)  # q: [P, 7168]
    """
    if type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(per_channel_cast_fused, locals())
    inputs = {"x": x, "x_sf": x_sf, "pos_to_token": pos_to_token}
    # x_sf is required with fp8 x and refused otherwise (the schema's `select`).
    bound = SCHEMA.bind(inputs)
    if type(round_sf) is not bool:
        raise TypeError(f"round_sf must be True or False; got {type(round_sf).__name__}")
    dims = bound.dims
    if x_sf is not None and dims["N"] % GROUP:
        raise ValueError(
            f"fp8 x needs N % {GROUP} == 0 (one x_sf scale per {GROUP} columns); N = {dims['N']}"
        )
    if dims["P"] > _row_group_cast.ROWS_PER_LAUNCH:
        raise ValueError(
            f"pos_to_token has {dims['P']} rows; per_channel_cast_fused takes at most "
            f"{_row_group_cast.ROWS_PER_LAUNCH}: split pos_to_token"
        )
    q, scale = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, inputs)
    if dims["P"] == 0 or dims["N"] == 0:
        return q, scale
    if dims["T"] == 0:
        # Every row is a zero row (no index is below T): the kernel reads no x, but the
        # launcher refuses the NULL pointer of an empty tensor, so it gets a 1-row stand-in.
        x = x.new_zeros((1, dims["N"]))
        x_sf = None if x_sf is None else x_sf.new_zeros((1, max(x_sf.shape[1], 1)))
    tensors = (x, x_sf, pos_to_token, q, scale)
    SCHEMA.launch(
        bound.picked["X"], bound.device, tensors, _row_group_cast.ROUND_SF[round_sf], dims
    )
    return q, scale


example_shapes = SCHEMA.example_shapes
