"""MoE dispatch of quantised rows and their scales into a given fused layout: TileKernels
1.0.0's ``expand_to_fused_with_sf`` (op "expand_to_fused_with_sf").

``expand_to_fused`` (kernels_py/moe/expand_to_fused.py) for the FP8 data, and the same
scatter for the scale rows ``x_sf[T, F]`` (fp32 scales, or int32 words of packed UE8M0
exponents: 4-byte values moved as they are)::

    out[p] = x[t],  sf[p] = x_sf[t]     where p = token_topk_to_pos[t, k] >= 0
    out[p] = 0,     sf[p] = 0           where pos_to_expert[p] < 0

The scales are stored row-major ``out_sf[P, F]`` (layout "row") or, TileKernels'
``use_tma_aligned_col_major_sf``, column-major with the token dimension padded to a
multiple of 4 (layout "col"): the kernel writes the row-major buffer ``out_sf[F, P4]``,
``P4 = ceil(P / 4) * 4``, of which TileKernels returns the view ``out_sf[:, :P].T``; its
spare columns ``P .. P4 - 1`` are zeroed (TileKernels' reference allocates the buffer with
zeros). Rows that are neither routed nor padding are left unwritten, as expand_to_fused.

One kernel, expand_to_fused's grid and data path (its ``data_ops`` macro, block (b, c) moving
column chunk c of token row b); the blocks of chunk 0 also move the scale row, before the
data: each thread loads scale columns ``tx, tx + 128, ...`` of token b once and stores them
to the token's K rows (and zeroes them for a padding row b). Its loops stay rolled
(``rolled``) and it runs before the data path, whose registers (the chunk's vectors, the K
rows' addresses) then need not live beside the scale move's: 42 registers per thread on
sm_90a against 168 before (tests/test_sass_generic.py). A column-major scale store is 4
bytes at a stride of ``4 P4`` bytes, as TileKernels' kernel stores them; the scales are
``4 F`` bytes per row against ``H`` bytes of data (F = H / 128 or H / 32), so they are at
most an eighth of the traffic. Block (0, 0) also zeroes the spare columns.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .expand_to_fused import CHUNK_BYTES, ITEMSIZE, THREADS, data_ops, rolled
from .expand_to_fused import reference as expand_reference

DTYPE = "float8_e4m3fn"  # the data (TileKernels' casts with 32/128-column scales)
SF_DTYPES = ("float32", "int32")  # fp32 scales, packed UE8M0 words
LAYOUTS = ("row", "col")
TMA_ALIGN = 4  # the column-major buffer's token dimension: a multiple of 4


def factory(arch: str, dtype: str, sf_dtype: str, layout: str):
    """TileLang prim_func ``(x[T, H] e4m3, x_sf[T, F] sf, token_topk_to_pos[T, K] i32,
    pos_to_expert[P] i32, out[P, H] e4m3, out_sf[P, F] | [F, ceil(P/4)*4] sf)``. ``arch``
    changes only whether the data stores use the inline-PTX L2 hint (CUDA targets)."""
    if dtype != DTYPE or sf_dtype not in SF_DTYPES or layout not in LAYOUTS:
        raise ValueError(
            f"expand_to_fused_with_sf: unsupported key {dtype!r}, {sf_dtype!r}, {layout!r}"
        )
    return _build(sf_dtype, layout, arch.startswith("sm_"))


def _build(sf_dtype: str, layout: str, cuda: bool):
    import tilelang.language as T

    chunk = CHUNK_BYTES // ITEMSIZE[DTYPE]
    Tn = T.dynamic("T")
    H = T.dynamic("H")
    F = T.dynamic("F")
    K = T.dynamic("K")
    P = T.dynamic("P")
    sf_shape = (P, F) if layout == "row" else (F, T.ceildiv(P, TMA_ALIGN) * TMA_ALIGN)
    rows = data_ops(T, DTYPE, cuda)
    sf_rows = _sf_ops(T, sf_dtype, layout)

    @T.prim_func
    def expand_to_fused_with_sf(
        x: T.Tensor((Tn, H), DTYPE),
        x_sf: T.Tensor((Tn, F), sf_dtype),
        token_topk_to_pos: T.Tensor((Tn, K), "int32"),
        pos_to_expert: T.Tensor((P,), "int32"),
        out: T.Tensor((P, H), DTYPE),
        out_sf: T.Tensor(sf_shape, sf_dtype),
    ):
        # at least one chunk column: the scales move even where H is 0
        with T.Kernel(T.max(Tn, P), T.max(ceildiv(T, H, chunk), 1), threads=THREADS) as (b, c):
            tx = T.get_thread_binding()
            if c == 0:
                sf_rows(x_sf, token_topk_to_pos, pos_to_expert, out_sf, b, tx)
            rows(x, token_topk_to_pos, pos_to_expert, out, b, c, tx)

    return expand_to_fused_with_sf


def _sf_ops(T, sf_dtype: str, layout: str):
    """A ``T.macro`` moving the scale row of token b (``x_sf[b]``) to its K rows, zeroing
    the scales of row b if it is padding, and (block 0, layout "col") the spare columns."""

    @T.macro
    def put(out_sf, p, f, value):
        if layout == "row":
            out_sf[p, f] = value
        else:
            out_sf[f, p] = value

    @T.macro
    def move_sf(x_sf, token_topk_to_pos, pos_to_expert, out_sf, b, tx):
        F = x_sf.shape[1]
        P = pos_to_expert.shape[0]
        steps = T.ceildiv(F, THREADS)
        zero = T.cast(0, sf_dtype)
        value = T.alloc_local((1,), sf_dtype)
        if b < P:
            if pos_to_expert[b] < 0:  # padding row: zero scales
                for i in rolled(T, steps):
                    if i * THREADS + tx < F:
                        put(out_sf, b, i * THREADS + tx, zero)
        if b < x_sf.shape[0]:
            for i in rolled(T, steps):
                f = i * THREADS + tx
                if f < F:
                    value[0] = x_sf[b, f]
                    for k in rolled(T, token_topk_to_pos.shape[1]):
                        p = T.alloc_var("int32", init=token_topk_to_pos[b, k])
                        if (p >= 0) & (p < P):
                            put(out_sf, p, f, value[0])
        if layout == "col":
            if b == 0:  # the spare token columns of the padded buffer: zeros
                for j in T.unroll(TMA_ALIGN - 1):
                    if P + j < out_sf.shape[1]:
                        for i in rolled(T, steps):
                            if i * THREADS + tx < F:
                                out_sf[i * THREADS + tx, P + j] = zero

    return move_sf


def padded_columns(p: int) -> int:
    """The column-major scale buffer's token dimension: ``ceil(p / 4) * 4``."""
    return -(-p // TMA_ALIGN) * TMA_ALIGN


def reference(x, x_sf, token_topk_to_pos, pos_to_expert, layout: str = "row"):
    """torch reference, TileKernels' semantics: ``(out, out_sf)`` as the kernel writes them;
    `out` and the scale rows are expand_to_fused's reference scatter of `x` and `x_sf`
    (zero except the routed rows); layout "col": the scales as the zero-padded buffer
    ``[F, ceil(P / 4) * 4]`` (TileKernels returns ``buffer[:, :P].T``)."""
    import torch

    out = expand_reference(x, token_topk_to_pos, pos_to_expert)
    rows = expand_reference(x_sf, token_topk_to_pos, pos_to_expert)
    if layout == "row":
        return out, rows
    p, f = rows.shape
    buf = torch.zeros(f, padded_columns(p), dtype=rows.dtype, device=rows.device)
    buf[:, :p] = rows.T
    return out, buf


SPEC = KernelSpec(
    op="expand_to_fused_with_sf",
    factory=factory,
    keys=tuple(
        {"dtype": DTYPE, "sf_dtype": s, "layout": lay} for s in SF_DTYPES for lay in LAYOUTS
    ),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="per-thread copies, no PDL, reduction or arch choice (the L2 hint is "
    "guarded by __CUDA_ARCH__ in the source)",
    doc="expand_to_fused of e4m3 rows and their fp32 / packed-UE8M0 scale rows, scales "
    "row-major or TMA-aligned column-major (TileKernels' expand_to_fused_with_sf).",
)
