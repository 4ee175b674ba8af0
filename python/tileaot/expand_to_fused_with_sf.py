"""MoE dispatch of FP8 rows and their scales into TileKernels' fused layout, given its mapping
(op "expand_to_fused_with_sf")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays
from ._schema import OpSchema, short_of

if TYPE_CHECKING:
    import torch

_OP = "expand_to_fused_with_sf"
TMA_ALIGN = 4  # the column-major scale buffer's token dimension: a multiple of 4
_SF_DIMS = {"row": {"R": "P", "C": "F"}, "col": {"R": "F", "C": f"(P + 3) // {TMA_ALIGN} * 4"}}


def _by_key(key: str) -> dict[str, int | str]:
    """A key "e4m3,fp32,col" fixes the scale output's shape: [P, F] or [F, ceil(P/4)*4]."""
    return _SF_DIMS[key.rpartition(",")[2]]


def _key_of(args: dict) -> str:
    """The key of a call for torch's fake (the scale dtype and layout)."""
    layout = "col" if args["use_tma_aligned_col_major_sf"] else "row"
    return f"e4m3,{short_of(args['x_sf'].dtype)},{layout}"


SCHEMA = OpSchema(
    _OP,
    "x[T, H]: X, x_sf[T, F]: S, token_topk_to_pos[T, K]: i32, pos_to_expert[P]: i32"
    " -> out[P, H]: X, out_sf[R, C]: S",
    dtypes={"X": ("e4m3",), "S": ("fp32", "i32")},
    fields={"X": "dtype", "S": "sf_dtype"},
    key="{X},{S},{layout}",
    keyed=_by_key,
    key_of=_key_of,
    example={"T": 4096, "H": 7168, "F": 56, "K": 8, "P": 34816},
)


def expand_to_fused_with_sf(
    x: torch.Tensor,
    x_sf: torch.Tensor,
    token_topk_to_pos: torch.Tensor,
    pos_to_expert: torch.Tensor,
    *,
    use_tma_aligned_col_major_sf: bool = False,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`expand_to_fused` of FP8 rows together with their scale rows (TileKernels 1.0.0's
    ``expand_to_fused_with_sf``), bit for bit as its reference on a valid mapping.

    ``out[p] = x[t]`` and ``out_sf[p] = x_sf[t]`` for every ``p = token_topk_to_pos[t, k] >=
    0``; ``out[p] = 0`` and ``out_sf[p] = 0`` for every padding row (``pos_to_expert[p] <
    0``). The mapping is the one TileKernels' ``get_fused_mapping`` returns (every row routed
    once or padding); rows that are neither are left unwritten, positions outside ``[0, P)``
    are skipped (see `expand_to_fused`). Scales are 4-byte values moved as they are: float32
    scales, or int32 words of four packed UE8M0 exponents.

    ``use_tma_aligned_col_major_sf=True``: the scales are returned column-major as TileKernels
    stores them for TMA, as their row-major buffer ``out_sf`` ``[F, ceil(P / 4) * 4]`` (the
    token dimension padded to a multiple of 4; the spare columns are zeros, as TileKernels'
    reference): ``out_sf[:, :P].T`` is TileKernels' ``[P, F]`` view
    (`tileaot.tile_kernels.moe.expand_to_fused_with_sf` returns that view).

    Args:
        x: CUDA tensor ``[T, H]`` ``torch.float8_e4m3fn``, contiguous, 16-byte aligned; any H
            (rows of a multiple of 16 bytes take 16-byte accesses).
        x_sf: ``[T, F]`` ``torch.float32`` or ``torch.int32`` scale row of each token (any
            ``F >= 1``: TileKernels' ``ceil(H / 32)`` or ``ceil(H / 128)``, or a quarter of
            that in packed words); same device, contiguous, aligned.
        token_topk_to_pos: ``[T, K]`` ``torch.int32`` row of `out` of each (token, slot), -1
            where dropped; same device, contiguous, aligned.
        pos_to_expert: ``[P]`` ``torch.int32`` expert of each row of `out`, negative for a
            padding row; same device, contiguous, aligned.
        use_tma_aligned_col_major_sf: return the scales column-major (above); default False:
            row-major ``[P, F]``.
        out: optional ``(out, out_sf)`` to write into, with exactly the shapes and dtypes
            below, on the device of `x`, contiguous, aligned, not overlapping the inputs or
            each other.

    Returns:
        ``(out, out_sf)``: `out` ``[P, H]`` ``torch.float8_e4m3fn``; `out_sf` of the dtype of
        `x_sf`, ``[P, F]`` (or ``[F, ceil(P / 4) * 4]`` column-major, above). With no routed
        entries (``T == 0`` or ``K == 0``) both are zeroed and nothing is launched.

    Raises:
        TypeError: a tensor argument is not a tensor or has the wrong dtype;
            `use_tma_aligned_col_major_sf` is not a bool.
        ValueError: a tensor has the wrong rank; `x`, `x_sf` and `token_topk_to_pos` differ in
            T; `x` or `x_sf` has no columns; a tensor is not on a CUDA device (the same one), not
            contiguous or not 16-byte aligned; a dimension or element count reaches 2**31;
            `out` has the wrong shapes or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtypes or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    One kernel, enqueued on torch's current stream of `x`'s device; the call returns without
    synchronising. Arrays of other frameworks (CuPy, ... via DLPack) work too; see
    `tileaot.use_stream`.

    Example (the mapping from TileKernels' ``get_fused_mapping``):
        >>> import torch, tileaot, tile_kernels
        >>> x = torch.randn(4096, 7168, dtype=torch.bfloat16, device="cuda")
        >>> q, sf = tileaot.per_token_cast_fp8(x, 128)  # sf: [4096, 56] float32
        >>> idx = torch.randint(0, 256, (4096, 8), device="cuda")
        >>> pos_to_expert, _, _, pos, *_ = tile_kernels.moe.get_fused_mapping(idx, 256, 0, 128)
        >>> qs, sfs = tileaot.expand_to_fused_with_sf(q, sf, pos, pos_to_expert)
        >>> torch.equal(sfs[pos[0, 0]], sf[0])
        True
    """
    if type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(expand_to_fused_with_sf, locals())
    inputs = {
        "x": x,
        "x_sf": x_sf,
        "token_topk_to_pos": token_topk_to_pos,
        "pos_to_expert": pos_to_expert,
    }
    bound = SCHEMA.bind(inputs)
    if type(use_tma_aligned_col_major_sf) is not bool:
        raise TypeError(
            "use_tma_aligned_col_major_sf must be True or False; got "
            f"{type(use_tma_aligned_col_major_sf).__name__}"
        )
    dims = bound.dims
    if dims["F"] == 0 or dims["H"] == 0:
        raise ValueError(
            f"x has {dims['H']} and x_sf {dims['F']} columns; pass the FP8 rows [T, H] and each "
            "token's scale row [T, F] with H, F >= 1 (per_token_cast_fp8 writes F = H / group)"
        )
    layout = "col" if use_tma_aligned_col_major_sf else "row"
    key = _key(bound, layout)
    SCHEMA.fix(bound, key)
    y, y_sf = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, inputs)
    if dims["P"] == 0:
        return y, y_sf
    if dims["T"] * dims["K"] == 0:  # nothing routed: every row of a valid mapping is padding
        return y.zero_(), y_sf.zero_()  # (and an empty input has no data pointer to pass)
    tensors = (x, x_sf, token_topk_to_pos, pos_to_expert, y, y_sf)
    SCHEMA.launch(key, bound.device, tensors, (), dims)
    return y, y_sf


def _key(bound: Any, layout: str) -> str:
    return f"{bound.picked['X']},{bound.picked['S']},{layout}"


example_shapes = SCHEMA.example_shapes
