"""Per-token (or per-128-group) cast to FP8 E4M3 with float32 scales (op "per_token_cast_fp8"):
TileKernels' ``per_token_cast`` to ``"e4m3"`` with row-major float32 scales."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib, _validate

if TYPE_CHECKING:
    import torch

_OP = "per_token_cast_fp8"
_DTYPES = ("bf16", "fp16", "fp32")
GROUP = 128  # the one group width built; other widths are per-token only (group_size == N)
# Dispatch keys by dtype, spelled once here so the call path does no string work.
_G128 = {d: d + ",g128" for d in _DTYPES}
_TOKEN = {d: d + ",token" for d in _DTYPES}
_ROUND_SF = {False: (0.0,), True: (1.0,)}  # the kernels' runtime scalar round_sf
# g128: row tiles of 64 rows go on gridDim.y (65535 at most; kernels_py/quant/
# per_token_cast_fp8.py MAX_ROW_TILES, TILE_ROWS), so a launch covers at most this many rows.
_ROWS_PER_LAUNCH = 65535 * 64
_WRITES_Q_SCALE = 0b110  # `_lib.fast`: tensors (x, q, scale), q and scale written


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
        group_size: ``128`` (the default): one scale per 128 columns, ``N % 128 == 0`` required.
            ``None`` or ``N``: one scale per row (per token). No other value is built.
        round_sf: round each scale up to a power of two (``2^ceil(log2(amax / 448))``), as
            DeepGEMM-style UE8M0 scales need; default False.
        out: optional ``(q, scale)`` to write into instead of allocating, with exactly the
            shapes and dtypes below, on the device of `x`, contiguous, aligned, not overlapping
            `x` or each other.

    Returns:
        ``(q, scale)``: `q` ``[M, N]`` ``torch.float8_e4m3fn``; `scale` ``[M, N // 128]``
        (``group_size=128``) or ``[M, 1]`` (per token), ``torch.float32``. If `x` has no
        elements nothing is launched; with ``N == 0`` a per-token `scale` is filled with zeros.

    Raises:
        TypeError: `x` or `out` is not a tensor / pair of tensors, or has an unsupported dtype;
            `group_size` is not an int or None; `round_sf` is not a bool.
        ValueError: `x` is not 2-D; `group_size` is unsupported, or 128 with ``N % 128 != 0``; a
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
                x.new_empty(m, n // GROUP if group_size else 1, dtype=torch.float32),
            )
        if _lib.fast((_OP, x.dtype, group_size), (x, *pair), _ROUND_SF[round_sf], _WRITES_Q_SCALE):
            return pair
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(per_token_cast_fp8, locals())
    fw = _arrays.namespace(x)
    dtype = _validate.dtype_key("x", x, _DTYPES)
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, N]; got shape {tuple(x.shape)}")
    m, n = x.shape
    if type(group_size) is not int and group_size is not None:
        group_size = _validate.optional_int("group_size", group_size)
    if type(round_sf) is not bool:
        raise TypeError(f"round_sf must be True or False; got {type(round_sf).__name__}")
    if group_size == GROUP:
        if n % GROUP:
            raise ValueError(
                f"group_size={GROUP} needs N % {GROUP} == 0, but x has N = {n}; pad x or pass "
                "group_size=None for one scale per token"
            )
        key = _G128[dtype]
        groups = n // GROUP
    elif group_size is None or group_size == n:
        key = _TOKEN[dtype]
        groups = 1
    else:
        raise ValueError(
            f"group_size={group_size} is not supported; supported: {GROUP} (needs N % {GROUP} "
            f"== 0) or None / N (= {n}, one scale per token)"
        )
    device = _validate.check_memory(("x",), (x,))
    if out is None:
        q = x.new_empty(m, n, dtype=fw.float8_e4m3fn)  # sizes as varargs: 1 us faster
        scale = x.new_empty(m, groups, dtype=fw.float32)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"out must be a (q, scale) pair of tensors; got {type(out).__name__}")
        q, scale = out
        _validate.check_out("out[0] (q)", q, fw.float8_e4m3fn, (m, n), device)
        _validate.check_out("out[1] (scale)", scale, fw.float32, (m, groups), device)
        _validate.check_no_overlap(("out[0] (q)", "out[1] (scale)"), (q, scale), ("x",), (x,))
    if m == 0 or n == 0:
        if groups and m:  # per-token scales of empty rows: defined, not garbage
            scale.zero_()
        return q, scale
    handle = _lib.handle(_OP, key)
    stream = _lib.current_stream(device)
    x_ptr, q_ptr, s_ptr = x.data_ptr(), q.data_ptr(), scale.data_ptr()
    row_bytes = n * x.element_size()
    step = _ROWS_PER_LAUNCH if key == _G128[dtype] else m  # token: rows on gridDim.x
    for r0 in range(0, m, step):  # one launch unless M > 4,194,240 (g128)
        rows = min(m - r0, step)
        _lib.native().launch(
            handle,
            device,
            stream,
            (x_ptr + r0 * row_bytes, q_ptr + r0 * n, s_ptr + r0 * groups * 4),
            (rows, n, rows, n, rows, groups),
            _ROUND_SF[round_sf],
        )
    if type(x) is _arrays.Tensor and m <= step and group_size in (GROUP, None):
        # One launch over exactly (x, q, scale): what the short path passes for this key.
        _lib.learn((_OP, x.dtype, group_size), handle)
    return q, scale


def example_shapes(key: str) -> tuple[str, tuple[int, ...]]:
    """A typical call for `python -m tileaot info`: its description and flat shapes."""
    groups = 7168 // GROUP if key.endswith(",g128") else 1
    return "x[4096, 7168]", (4096, 7168, 4096, 7168, 4096, groups)
