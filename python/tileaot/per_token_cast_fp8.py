"""Per-token (or per-32/64/128-column) cast to FP8 E4M3, float32 scales (op "per_token_cast_fp8"):
TileKernels' ``per_token_cast`` to ``"e4m3"`` with row-major float32 scales."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib, _validate
from ._schema import OpSchema, short_of

if TYPE_CHECKING:
    import torch

_OP = "per_token_cast_fp8"
GROUP = 128  # the default group width
GROUPS = (32, 64, 128)  # the group widths built; any other width is per-token (== N) only


def _scale_columns(key: str) -> dict[str, int | str]:
    """Scales per row: one per 32, 64 or 128 columns (g32, g64, g128), or one (token)."""
    mode = key.rpartition(",")[2]
    return {"G": f"N // {mode[1:]}"} if mode != "token" else {"G": 1}


def _key_of(args: dict) -> str:
    group = args["group_size"]
    return f"{short_of(args['x'].dtype)},{f'g{group}' if group in GROUPS else 'token'}"


SCHEMA = OpSchema(
    _OP,
    "x[M, N]: T -> q[M, N]: e4m3, scale[M, G]: fp32; round_sf: int32",
    dtypes={"T": ("bf16", "fp16", "fp32")},
    key="{T},{group}",
    keyed=_scale_columns,
    key_of=_key_of,
    example={"M": 4096, "N": 7168},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
# Dispatch keys by dtype, spelled once here so the call path does no string work.
_GROUPED = {(d, g): f"{d},g{g}" for d in SCHEMA.dtypes["T"] for g in GROUPS}
_TOKEN = {d: d + ",token" for d in SCHEMA.dtypes["T"]}
_ROUND_SF = {False: (0.0,), True: (1.0,)}  # the kernels' runtime scalar round_sf
# g128: row tiles of 64 rows go on gridDim.y (65535 at most; kernels_py/quant/
# per_token_cast_fp8.py MAX_ROW_TILES, TILE_ROWS), so a launch covers at most this many rows
# (g32/g64 tiles are taller: the same bound is safe for them).
_ROWS_PER_LAUNCH = 65535 * 64


def per_token_cast_fp8(
    x: torch.Tensor,
    group_size: int | None = GROUP,
    *,
    round_sf: bool = False,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise each row of `x` to FP8 E4M3, one float32 scale per group of columns.

    TileKernels 1.0.0's ``per_token_cast(x, "e4m3", group_size, round_sf=round_sf)`` (row-major
    float32 scales), bit for bit. In float32, for each row and group of `group_size` columns::

        amax  = max(max(|x_group|), 1e-4)
        scale = amax / 448                  (round_sf=True: rounded up to a power of two)
        q     = e4m3(x_group * (448 / amax))  (round_sf=True: x_group * (1 / scale), exact)

    (448 is the E4M3 maximum; every operation rounds to nearest even, the conversion
    saturates), so that ``x ≈ q.float() * scale`` broadcast over the group. Non-finite
    elements give unspecified results.

    Args:
        x: CUDA tensor ``[M, N]``, dtype ``torch.bfloat16``, ``torch.float16`` or
            ``torch.float32``; contiguous, with a 16-byte-aligned data pointer.
        group_size: ``128`` (the default), ``64`` or ``32``: one scale per that many columns,
            ``N % group_size == 0`` required. ``None`` or ``N``: one scale per row (per
            token). No other value is built.
        round_sf: round each scale up to a power of two (``2^ceil(log2(amax / 448))``), as
            DeepGEMM-style UE8M0 scales need; default False.
        out: optional ``(q, scale)`` to write into instead of allocating, with exactly the
            shapes and dtypes below, on the device of `x`, contiguous, aligned, not overlapping
            `x` or each other.

    Returns:
        ``(q, scale)``: `q` ``[M, N]`` ``torch.float8_e4m3fn``; `scale` ``[M, N // group_size]``
        (``group_size`` 32, 64 or 128) or ``[M, 1]`` (per token), ``torch.float32``. If `x` has no
        elements nothing is launched; with ``N == 0`` a per-token `scale` is filled with zeros.

    Raises:
        TypeError: `x` or `out` is not a tensor / pair of tensors, or has an unsupported dtype;
            `group_size` is not an int or None; `round_sf` is not a bool.
        ValueError: `x` is not 2-D; `group_size` is unsupported, or does not divide N; a
            tensor is not on a CUDA device (the same one), not contiguous or not 16-byte
            aligned; a dimension or element count reaches 2**31; `out` has a wrong shape or
            overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype, mode, shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `x`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(16, 7168, dtype=torch.bfloat16, device="cuda")
        >>> q, scale = tileaot.per_token_cast_fp8(x)  # scale: [16, 56]
        >>> x_hat = (q.float().view(16, 56, 128) * scale[:, :, None]).view(16, 7168)
        >>> q32, s32 = tileaot.per_token_cast_fp8(x, group_size=32)  # s32: [16, 224]
        >>> q_tok, s_tok = tileaot.per_token_cast_fp8(x, group_size=None)  # s_tok: [16, 1]
    """
    if (
        type(x) is _arrays.Tensor
        and (group_size is None or type(group_size) is int)
        and type(round_sf) is bool
        and _arrays.plain_pair(out, 2)
        and x.dim() == 2
        and x.shape[0] <= _ROWS_PER_LAUNCH
    ):
        pair = out
        if pair is None:
            m, n = x.shape
            torch = _arrays._torch
            pair = (
                x.new_empty(m, n, dtype=torch.float8_e4m3fn),
                x.new_empty(m, n // group_size if group_size in GROUPS else 1, dtype=torch.float32),
            )
        if _lib.fast((_OP, x.dtype, group_size), (x, *pair), _ROUND_SF[round_sf], _WRITES):
            return pair
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(per_token_cast_fp8, locals())
    bound = SCHEMA.bind({"x": x})
    if type(group_size) is not int and group_size is not None:
        group_size = _validate.optional_int("group_size", group_size)
    if type(round_sf) is not bool:
        raise TypeError(f"round_sf must be True or False; got {type(round_sf).__name__}")
    key = _key(bound.picked["T"], bound.dims["N"], group_size)
    SCHEMA.fix(bound, key)
    q, scale = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, {"x": x})
    m, n = bound.dims["M"], bound.dims["N"]
    if m == 0 or n == 0:
        if bound.dims["G"] and m:  # per-token scales of empty rows: defined, not garbage
            scale.zero_()
        return q, scale
    scalars = _ROUND_SF[round_sf]
    step = m if key.endswith(",token") else _ROWS_PER_LAUNCH  # token: rows on gridDim.x
    if m <= step:
        handle = SCHEMA.launch(key, bound.device, (x, q, scale), scalars, bound.dims)
        if type(x) is _arrays.Tensor and (group_size is None or group_size in GROUPS):
            # One launch over exactly (x, q, scale): what the short path passes for this key.
            _lib.learn((_OP, x.dtype, group_size), handle)
        return q, scale
    # Row slices, by pointer offsets (DLPack views cannot be sliced).
    handle, dims = _lib.handle(_OP, key), bound.dims
    stream, native = _lib.current_stream(bound.device), _lib.native()
    x_ptr, q_ptr, s_ptr = x.data_ptr(), q.data_ptr(), scale.data_ptr()
    row_bytes = n * x.element_size()
    for r0 in range(0, m, step):  # one launch unless M > 4,194,240 (grouped)
        ptrs = (x_ptr + r0 * row_bytes, q_ptr + r0 * n, s_ptr + r0 * dims["G"] * 4)
        shapes = SCHEMA.flat({**dims, "M": min(m - r0, step)})
        native.launch(handle, bound.device, stream, ptrs, shapes, scalars)
    return q, scale


def _key(dtype: str, n: int, group_size: int | None) -> str:
    """The dispatch key of a checked call: g32/g64/g128, or token for ``None`` / ``N``."""
    if group_size in GROUPS:
        if n % group_size:
            raise ValueError(
                f"group_size={group_size} needs N % {group_size} == 0, but x has N = {n}; pad "
                "x or pass group_size=None for one scale per token"
            )
        return _GROUPED[dtype, group_size]
    if group_size is None or group_size == n:
        return _TOKEN[dtype]
    raise ValueError(
        f"group_size={group_size} is not supported; supported: 32, 64, 128 (N % group_size "
        f"== 0) or None / N (= {n}, one scale per token)"
    )


example_shapes = SCHEMA.example_shapes
