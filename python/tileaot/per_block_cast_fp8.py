"""Per-block (128x128) cast to FP8 E4M3 with float32 scales (op "per_block_cast_fp8"):
TileKernels' ``per_block_cast`` to ``"e4m3"`` with row-major float32 scales."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "per_block_cast_fp8"
BLOCK = 128  # the scale block: BLOCK x BLOCK elements of x share one scale
_BLOCKS = f"(M + {BLOCK - 1}) // {BLOCK}, (N + {BLOCK - 1}) // {BLOCK}"
SCHEMA = OpSchema(
    _OP,
    f"x[M, N]: T -> q[M, N]: e4m3, scale[{_BLOCKS}]: fp32; round_sf: int32",
    dtypes={"T": ("bf16", "fp16", "fp32")},
    example={"M": 4096, "N": 7168},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
# The kernel's grid has one row per 128-row block, and gridDim.y stops at 65535: taller inputs
# are cut into launches of this many rows (a multiple of BLOCK, so blocks never straddle).
_ROWS_PER_LAUNCH = 65535 * BLOCK
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
        if _lib.fast((_OP, x.dtype), (x, *pair), _ROUND_SF[round_sf], _WRITES):
            return pair
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(per_block_cast_fp8, locals())
    bound = SCHEMA.bind({"x": x})
    if type(round_sf) is not bool:
        raise TypeError(f"round_sf must be True or False; got {type(round_sf).__name__}")
    q, scale = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, {"x": x})
    m = bound.dims["M"]
    if m == 0 or bound.dims["N"] == 0:
        return q, scale
    if m <= _ROWS_PER_LAUNCH:
        handle = SCHEMA.launch(
            bound.picked["T"], bound.device, (x, q, scale), _ROUND_SF[round_sf], bound.dims
        )
        if type(x) is _arrays.Tensor:  # one launch over (x, q, scale): what the short path passes
            _lib.learn((_OP, x.dtype), handle)
        return q, scale
    # Row slices of whole scale blocks, by pointer offsets (DLPack views cannot be sliced).
    handle, dims = _lib.handle(_OP, bound.picked["T"]), bound.dims
    stream, native = _lib.current_stream(bound.device), _lib.native()
    x_ptr, q_ptr, s_ptr = x.data_ptr(), q.data_ptr(), scale.data_ptr()
    row_bytes, scale_row_bytes = dims["N"] * x.element_size(), scale.shape[1] * 4
    for r0 in range(0, m, _ROWS_PER_LAUNCH):
        ptrs = (
            x_ptr + r0 * row_bytes,
            q_ptr + r0 * dims["N"],
            s_ptr + r0 // BLOCK * scale_row_bytes,
        )
        shapes = SCHEMA.flat({**dims, "M": min(m - r0, _ROWS_PER_LAUNCH)})
        native.launch(handle, bound.device, stream, ptrs, shapes, _ROUND_SF[round_sf])
    return q, scale


example_shapes = SCHEMA.example_shapes
