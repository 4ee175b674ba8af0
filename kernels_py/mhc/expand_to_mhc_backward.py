"""expand_to_mhc, backward: ``grad_x[t, :] = sum_r grad_out[t, r, :]`` (see expand_to_mhc.py).

The gradient of R copies is the sum of the copies' gradients, as TileKernels' backward kernel
computes it (``tile_kernels/mhc/expand_kernel.py``): in float32, starting from 0 and adding
``r = 0, 1, ..., R - 1`` in order, rounded once to bf16 (``reference`` does the same, so the
kernel matches it bit for bit).

The tile of the forward (``ROWS`` rows x 1024 columns per block of 128 threads, 8 columns per
thread): for each ``r`` each thread loads its 16-byte vector of the ``ROWS`` rows (ROWS loads
in flight), adds them to its float32 sums, and finally stores each row's 8 rounded sums with
one 16-byte store. Element accesses when ``H % 8 != 0``. One generic variant (R, H runtime).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .expand_to_mhc import COLS, ROWS, THREADS, VEC, Tile


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(grad_out[M, R, H], grad_x[M, H])``. ``arch`` does not change the
    code."""
    if dtype != "bfloat16":
        raise ValueError(f"expand_to_mhc_backward: unsupported dtype {dtype!r}")
    import tilelang.language as T

    M, R, H = T.dynamic("M"), T.dynamic("R"), T.dynamic("H")
    stream_sum = stream_sum_macro(T, M, R, H, weighted=False)

    @T.prim_func
    def expand_to_mhc_backward(
        grad_out: T.Tensor((M, R, H), "bfloat16"),
        grad_x: T.Tensor((M, H), "bfloat16"),
    ):
        with T.Kernel(ceildiv(T, M, ROWS), ceildiv(T, H, COLS), threads=THREADS) as (bm, bc):
            stream_sum(grad_out, None, grad_x, bm, bc)

    return expand_to_mhc_backward


def stream_sum_macro(T, M, R, H, weighted: bool):
    """Macro ``(src[M, R, H], w[M, R, 1] or None, dst[M, H], bm, bc)``: the block's tile of
    ``dst[t, :] = bf16(sum_r w[t, r] * src[t, r, :])`` (``w`` = 1 unless `weighted`), float32
    sums from 0 in r order. Also mhc_pre_apply_mix's forward (weighted)."""
    tile = Tile(T, M, H)

    def term(w, row, m, value):
        if not weighted:
            return value
        return T.if_then_else(row < M, w[row, m, 0], T.float32(0)) * value

    @T.macro
    def stream_sum(src, w, dst, bm, bc):
        tx = T.get_thread_binding()
        col = tile.col(bc, tx)
        g = T.alloc_local((ROWS, VEC), "bfloat16")
        acc = T.alloc_local((ROWS, VEC), "float32")
        o = T.alloc_local((ROWS, VEC), "bfloat16")
        bits = T.view(o, (ROWS * 4,), "uint32")  # o as 4-byte words, for the stores
        for r in T.unroll(ROWS):
            for e in T.unroll(VEC):
                acc[r, e] = T.float32(0)
        if H % VEC == 0:
            T.assume(H % VEC == 0)  # rows start 16-byte aligned: vector accesses
            for m in T.serial(R):
                for r in T.unroll(ROWS):
                    for e in T.vectorized(VEC):
                        g[r, e] = T.if_then_else(
                            tile.whole(bm, bc, tx, r),
                            src[bm * ROWS + r, m, col + e],
                            T.bfloat16(0),
                        )
                for r in T.unroll(ROWS):
                    for e in T.unroll(VEC):
                        acc[r, e] = acc[r, e] + term(
                            w, bm * ROWS + r, m, T.cast(g[r, e], "float32")
                        )
            for r in T.unroll(ROWS):
                for e in T.unroll(VEC):
                    o[r, e] = T.cast(acc[r, e], "bfloat16")
                if tile.whole(bm, bc, tx, r):
                    T.stg128(dst[bm * ROWS + r, col], bits.vload([r * 4], "uint32x4"))
        else:
            for m in T.serial(R):
                for r in T.unroll(ROWS):
                    for e in T.unroll(VEC):
                        if tile.inside(bm, bc, tx, r, e):
                            acc[r, e] = acc[r, e] + term(
                                w,
                                bm * ROWS + r,
                                m,
                                T.cast(src[bm * ROWS + r, m, col + e], "float32"),
                            )
            for r in T.unroll(ROWS):
                for e in T.unroll(VEC):
                    if tile.inside(bm, bc, tx, r, e):
                        dst[bm * ROWS + r, col + e] = T.cast(acc[r, e], "bfloat16")

    return stream_sum


def reference(grad_out):
    """torch reference: float32 sums over dim -2 from 0, in order, rounded to bf16."""
    import torch

    shape = grad_out.shape[:-2] + grad_out.shape[-1:]
    acc = torch.zeros(shape, dtype=torch.float32, device=grad_out.device)
    for r in range(grad_out.shape[-2]):
        acc = acc + grad_out[..., r, :].float()
    return acc.to(grad_out.dtype)


SPEC = KernelSpec(
    op="expand_to_mhc_backward",
    factory=factory,
    keys=({"dtype": "bfloat16"},),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="grad of expand_to_mhc: float32 sum of the R copies' gradients, [T, R, H] -> [T, H].",
)
