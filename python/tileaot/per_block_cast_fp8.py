"""Per-block (128x128) cast to FP8 E4M3 with float32 scales (op "per_block_cast_fp8"):
TileKernels' ``per_block_cast`` to ``"e4m3"`` with row-major float32 scales."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib, _validate

if TYPE_CHECKING:
    import torch

_OP = "per_block_cast_fp8"
_DTYPES = ("bf16", "fp16", "fp32")
BLOCK = 128  # the scale block: BLOCK x BLOCK elements of x share one scale
# The kernel's grid has one row per 128-row block, and gridDim.y stops at 65535: taller inputs
# are cut into launches of this many rows (a multiple of BLOCK, so blocks never straddle).
_ROWS_PER_LAUNCH = 65535 * BLOCK
_WRITES_Q_SCALE = 0b110  # `_lib.fast`: tensors (x, q, scale), q and scale written
_ROUND_SF = {False: (0.0,), True: (1.0,)}  # the kernel's runtime scalar round_sf


def per_block_cast_fp8(
    x: torch.Tensor,
    *,
    round_sf: bool = False,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise `x` to FP8 E4M3 with one float32 scale per 128x128 block.

    TileKernels 1.0.0's ``per_block_cast(x, "e4m3", (128, 128), round_sf=round_sf)`` (row-major
    float32 scales), bit for bit. For each block of 128 rows x 128 columns (the blocks at the
    bottom and right edges may be smaller), in float32 with ``amax = max(amax(|x_block|),
    1e-4)``: ``scale = amax / 448`` (448 is the E4M3 maximum; ``round_sf=True``: rounded up to
    a power of two) and ``q = x_block * (448 / amax)`` (``round_sf=True``: ``* (1 / scale)``,
    exact), rounded to nearest even into ``torch.float8_e4m3fn``, saturating at ±448; so
    ``x ≈ q.float() * scale`` broadcast over its block. For finite `x` the result equals, bit
    for bit, the torch reference ``kernels_py.quant.per_block_cast_fp8.reference``; non-finite
    elements give unspecified results.

    Args:
        x: CUDA tensor ``[M, N]`` (any M and N), dtype ``torch.bfloat16``, ``torch.float16``
            or ``torch.float32``; contiguous, with a 16-byte-aligned data pointer. The fast
            path needs ``N % 8 == 0`` (``N % 4 == 0`` for float32); other N work, slower.
        round_sf: power-of-two scales (``2^ceil(log2(amax / 448))``); default False.
        out: optional ``(q, scale)`` to write into instead of allocating, with exactly the
            shapes and dtypes below, on the device of `x`, contiguous, 16-byte aligned, not
            overlapping `x` or each other.

    Returns:
        ``(q, scale)``: `q` ``[M, N]`` ``torch.float8_e4m3fn``; `scale`
        ``[ceil(M / 128), ceil(N / 128)]`` ``torch.float32``. If `x` has no elements nothing
        is launched (and `scale` has no elements either).

    Raises:
        TypeError: `x` is not a tensor or has an unsupported dtype; `round_sf` is not a bool;
            `out` is not a pair of tensors, or has a wrong dtype.
        ValueError: `x` is not 2-D; a tensor is not on a CUDA device (the same one), not
            contiguous or not 16-byte aligned; a dimension or element count reaches 2**31;
            `out` has a wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype, shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `x`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> w = torch.randn(4096, 7168, dtype=torch.bfloat16, device="cuda")
        >>> q, scale = tileaot.per_block_cast_fp8(w)  # scale: [32, 56]
        >>> s = scale.repeat_interleave(128, 0).repeat_interleave(128, 1)
        >>> w_hat = q.float() * s  # ≈ w, within e4m3 rounding
    """
    if (
        type(x) is _arrays.Tensor
        and x.dim() == 2
        and x.shape[0] <= _ROWS_PER_LAUNCH
        and type(round_sf) is bool
        and _arrays.plain_pair(out, 2)
    ):
        pair = out
        if pair is None:
            m, n = x.shape
            torch = _arrays._torch
            pair = (
                x.new_empty(m, n, dtype=torch.float8_e4m3fn),
                x.new_empty(-(-m // BLOCK), -(-n // BLOCK), dtype=torch.float32),
            )
        if _lib.fast((_OP, x.dtype), (x, *pair), _ROUND_SF[round_sf], _WRITES_Q_SCALE):
            return pair
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(per_block_cast_fp8, locals())
    fw = _arrays.namespace(x)
    dtype = _validate.dtype_key("x", x, _DTYPES)
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, N]; got shape {tuple(x.shape)}")
    if type(round_sf) is not bool:
        raise TypeError(f"round_sf must be True or False; got {type(round_sf).__name__}")
    m, n = x.shape
    bm, bn = -(-m // BLOCK), -(-n // BLOCK)
    device = _validate.check_memory(("x",), (x,))
    if out is None:
        q = x.new_empty(m, n, dtype=fw.float8_e4m3fn)  # sizes as varargs: 1 us faster
        scale = x.new_empty(bm, bn, dtype=fw.float32)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"out must be a (q, scale) pair of tensors; got {type(out).__name__}")
        q, scale = out
        _validate.check_out("out[0] (q)", q, fw.float8_e4m3fn, (m, n), device)
        _validate.check_out("out[1] (scale)", scale, fw.float32, (bm, bn), device)
        _validate.check_no_overlap(("out[0] (q)", "out[1] (scale)"), (q, scale), ("x",), (x,))
    if m == 0 or n == 0:
        return q, scale
    handle = _lib.handle(_OP, dtype)
    stream = _lib.current_stream(device)
    x_ptr, q_ptr, s_ptr = x.data_ptr(), q.data_ptr(), scale.data_ptr()
    row_bytes = n * x.element_size()
    for r0 in range(0, m, _ROWS_PER_LAUNCH):  # one launch unless M > 8,388,480
        rows = min(m - r0, _ROWS_PER_LAUNCH)
        _lib.native().launch(
            handle,
            device,
            stream,
            (x_ptr + r0 * row_bytes, q_ptr + r0 * n, s_ptr + (r0 // BLOCK) * bn * 4),
            (rows, n, rows, n, -(-rows // BLOCK), bn),
            _ROUND_SF[round_sf],
        )
    if type(x) is _arrays.Tensor and m <= _ROWS_PER_LAUNCH:  # one launch over (x, q, scale)
        _lib.learn((_OP, x.dtype), handle)
    return q, scale


def example_shapes(key: str) -> tuple[str, tuple[int, ...]]:
    """A typical call for `python -m tileaot info`: its description and flat shapes."""
    return "x[4096, 7168]", (4096, 7168, 4096, 7168, 32, 56)
