"""MoE dispatch into TileKernels' fused layout, given its mapping (op "expand_to_fused")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "expand_to_fused"
SCHEMA = OpSchema(
    _OP,
    "x[T, H]: X, token_topk_to_pos[T, K]: i32, pos_to_expert[P]: i32 -> out[P, H]: X",
    dtypes={"X": ("bf16", "e4m3")},
    fields={"X": "dtype"},
    key="{X}",
    example={"T": 4096, "H": 7168, "K": 8, "P": 34816},
)


def expand_to_fused(
    x: torch.Tensor,
    token_topk_to_pos: torch.Tensor,
    pos_to_expert: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Copy each token's row of `x` to its rows of TileKernels' fused expert layout (TileKernels
    1.0.0's ``expand_to_fused``), bit for bit as its reference on a valid mapping.

    ``out[token_topk_to_pos[t, k]] = x[t]`` for every entry ``>= 0``, and ``out[p] = 0`` for
    every padding row (``pos_to_expert[p] < 0``). The mapping is the one TileKernels'
    ``get_fused_mapping`` returns: rows grouped by expert, each expert padded to its
    alignment, every row either routed once or padding. Rows that are neither are left
    unwritten (TileKernels' kernel leaves them too; its reference zeroes them). Positions are
    not checked on the host (that would need a sync): one outside ``[0, P)`` is skipped, never
    used as an address; two entries naming the same row leave either one's bytes.

    Differences from TileKernels: bf16 and e4m3 only (its kernel takes any dtype); ``out=`` is
    accepted; with no routed entries (``T == 0`` or ``K == 0``) `out` is zeroed (TileKernels
    launches nothing and returns an uninitialised tensor).

    Args:
        x: CUDA tensor ``[T, H]``, ``torch.bfloat16`` or ``torch.float8_e4m3fn``, contiguous,
            16-byte-aligned. Any H (rows of a multiple of 16 bytes take 16-byte accesses).
        token_topk_to_pos: ``[T, K]`` ``torch.int32`` row of `out` of each (token, slot), -1
            where dropped; same device, contiguous, aligned.
        pos_to_expert: ``[P]`` ``torch.int32`` expert of each row of `out`, negative for a
            padding row; same device, contiguous, aligned.
        out: optional ``[P, H]`` tensor of `x`'s dtype to write into, on the device of `x`,
            contiguous, aligned, not overlapping the inputs.

    Returns:
        ``out`` ``[P, H]`` in the dtype of `x` (`out` if given).

    Raises:
        TypeError: a tensor argument is not a tensor or has the wrong dtype.
        ValueError: a tensor has the wrong rank, or `x` and `token_topk_to_pos` differ in T; a
            tensor is not on a CUDA device (the same one), not contiguous or not 16-byte
            aligned; a dimension or element count reaches 2**31; `out` has the wrong shape or
            overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    One kernel, enqueued on torch's current stream of `x`'s device; the call returns without
    synchronising. Arrays of other frameworks (CuPy, ... via DLPack) work too; see
    `tileaot.use_stream`.

    Example (the mapping from TileKernels' ``get_fused_mapping``):
        >>> import torch, tileaot, tile_kernels
        >>> x = torch.randn(4096, 7168, dtype=torch.bfloat16, device="cuda")
        >>> idx = torch.randint(0, 256, (4096, 8), device="cuda")
        >>> pos_to_expert, _, _, pos, *_ = tile_kernels.moe.get_fused_mapping(idx, 256, 0, 128)
        >>> xs = tileaot.expand_to_fused(x, pos, pos_to_expert)
        >>> torch.equal(xs[pos[0, 0]], x[0])
        True
    """
    if type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(expand_to_fused, locals())
    inputs = {"x": x, "token_topk_to_pos": token_topk_to_pos, "pos_to_expert": pos_to_expert}
    bound = SCHEMA.bind(inputs)
    dims = bound.dims
    (y,) = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, inputs)
    if dims["P"] * dims["H"] == 0:
        return y
    if dims["T"] * dims["K"] == 0:  # nothing routed: every row of a valid mapping is padding
        return y.zero_()  # (and an empty input has no data pointer to pass)
    tensors = (x, token_topk_to_pos, pos_to_expert, y)
    SCHEMA.launch(bound.picked["X"], bound.device, tensors, (), dims)
    return y


example_shapes = SCHEMA.example_shapes
