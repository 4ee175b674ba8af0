"""Per-channel FP8 cast of gathered rows, optionally of FP8 rows cast back first: TileKernels
1.0.0's ``per_channel_cast_fused`` (op "per_channel_cast_fused").

Row ``p`` of the cast matrix is row ``pos_to_token[p]`` of the input, or zeros where
``pos_to_token[p] < 0`` (TileKernels' MoE expansion; an index ``>= T`` also reads as zeros,
TileKernels' kernel assumes none). With e4m3 input the row values are first cast back,
``x[t, c] * x_sf[t, c // 128]`` in float32 (TileKernels' QuantTensor input with
``num_per_channels=128``). The cast of those ``P`` rows is ``per_channel_cast_fp8``'s (one scale
per column per 128 rows, ``round_sf`` a runtime scalar), bit for bit as TileKernels' reference
``tile_kernels.torch.per_channel_cast_fused``::

    v[p, c] = x[s, c] (* x_sf[s, c // 128])   with s = pos_to_token[p] >= 0, else 0
    q, scale = per_channel_cast_fp8(v)

Kernel: per_channel_cast_fp8's tile (one CTA of 256 threads per 128 rows x 128 columns, its
column maxima and quantisation: the shared ``tile_ops`` macro); only the load differs: each
thread reads its rows' source indices and loads its 16-byte vector of each source row (zeros
for a negative index), e4m3 vectors (16 codes, one scale group) times the row's scale into
float32 registers. Grid ``(ceil(N/128), ceil(P/128))``; the wrapper refuses P past 65535 row
groups. e4m3 input needs N % 128 == 0 (TileKernels' requirement); bf16/fp16/fp32 any N (the
vector path when N is a multiple of the vector, element-wise otherwise).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .per_block_cast_fp8 import DTYPES, FP8, ITEMSIZE, MIN_BLOCKS
from .per_channel_cast_fp8 import COLS, ROWS, THREADS, tile_layout, tile_ops
from .per_channel_cast_fp8 import reference as cast_reference

GROUP = 128  # e4m3 input: columns per x_sf entry (TileKernels' num_per_channels)
IN_DTYPES = (*DTYPES, FP8)
_ITEMSIZE = {**ITEMSIZE, FP8: 1}


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(x[T, N], [x_sf[T, N // 128] fp32,] pos_to_token[P] i32,
    q[P, N] e4m3fn, scale[ceil(P/128), N] fp32, round_sf int32)``; x_sf only for e4m3 x.
    ``arch`` does not change the code."""
    if dtype not in IN_DTYPES:
        raise ValueError(f"per_channel_cast_fused: unsupported dtype {dtype!r}")
    import tilelang.language as T

    vec = 16 // _ITEMSIZE[dtype]  # elements per 16-byte vector
    Tn, N, P = T.dynamic("T"), T.dynamic("N"), T.dynamic("P")
    if dtype == FP8:
        tile = _tile_macro(T, dtype, Tn, P, N, vec, aligned=True)

        @T.prim_func
        def per_channel_cast_fused(
            x: T.Tensor((Tn, N), dtype),
            x_sf: T.Tensor((Tn, N // GROUP), "float32"),
            pos_to_token: T.Tensor((P,), "int32"),
            q: T.Tensor((P, N), FP8),
            scale: T.Tensor((T.ceildiv(P, ROWS), N), "float32"),
            round_sf: T.int32,
        ):
            with T.Kernel(ceildiv(T, N, COLS), ceildiv(T, P, ROWS), threads=THREADS) as (bn, bm):
                T.annotate_min_blocks_per_sm(MIN_BLOCKS["float32"])
                T.assume(N % GROUP == 0)
                tile(x, x_sf, pos_to_token, q, scale, round_sf, bm, bn)

        return per_channel_cast_fused

    vec_tile = _tile_macro(T, dtype, Tn, P, N, vec, aligned=True)
    scalar_tile = _tile_macro(T, dtype, Tn, P, N, vec, aligned=False)

    @T.prim_func
    def per_channel_cast_fused(
        x: T.Tensor((Tn, N), dtype),
        pos_to_token: T.Tensor((P,), "int32"),
        q: T.Tensor((P, N), FP8),
        scale: T.Tensor((T.ceildiv(P, ROWS), N), "float32"),
        round_sf: T.int32,
    ):
        with T.Kernel(ceildiv(T, N, COLS), ceildiv(T, P, ROWS), threads=THREADS) as (bn, bm):
            T.annotate_min_blocks_per_sm(MIN_BLOCKS[dtype])
            if N % vec == 0:
                T.assume(N % vec == 0)
                vec_tile(x, None, pos_to_token, q, scale, round_sf, bm, bn)
            else:
                scalar_tile(x, None, pos_to_token, q, scale, round_sf, bm, bn)

    return per_channel_cast_fused


def _tile_macro(T, dtype: str, Tn, P, N, vec: int, aligned: bool):
    """Macro casting tile (bm, bn) of the gathered rows: the gathered load, then
    per_channel_cast_fp8's ``tile_ops``. e4m3 x: the values, cast back, in a float32 buffer."""
    per_row = COLS // vec
    steps, slices = tile_layout(vec)
    fp8 = dtype == FP8
    buf_dtype = "float32" if fp8 else dtype
    finish = tile_ops(T, P, N, vec, aligned, dtype)
    zero = T.cast(0, buf_dtype)

    @T.macro
    def cast_tile(x, x_sf, pos_to_token, q, scale, round_sf, bm, bn):
        tx = T.get_thread_binding()
        src = T.alloc_local((steps,), "int32")
        buf = T.alloc_local((steps * vec,), buf_dtype)
        raw = T.alloc_local((vec,), dtype)
        sf = T.alloc_local((steps,), "float32")
        col = bn * COLS + (tx % per_row) * vec
        row0 = bm * ROWS + tx // per_row
        for i in T.unroll(steps):
            src[i] = -1
            if row0 + i * slices < P:
                src[i] = pos_to_token[row0 + i * slices]
        if fp8:
            for i in T.unroll(steps):
                sf[i] = T.float32(0)
                if (src[i] >= 0) & (src[i] < Tn) & (col < N):
                    sf[i] = x_sf[src[i], col // GROUP]
        for i in T.unroll(steps):
            if aligned:
                if (src[i] >= 0) & (src[i] < Tn) & (col < N):
                    if fp8:
                        for v in T.vectorized(vec):
                            raw[v] = x[src[i], col + v]
                        for v in T.unroll(vec):
                            buf[i * vec + v] = T.ieee_mul(T.cast(raw[v], "float32"), sf[i])
                    else:
                        for v in T.vectorized(vec):
                            buf[i * vec + v] = x[src[i], col + v]
                else:
                    for v in T.vectorized(vec):
                        buf[i * vec + v] = zero
            else:
                for v in T.unroll(vec):
                    buf[i * vec + v] = T.if_then_else(
                        (src[i] >= 0) & (src[i] < Tn) & (col + v < N),
                        x[src[i], col + v],
                        zero,
                    )
        finish(buf, q, scale, round_sf, bm, bn, tx)

    return cast_tile


def gather_values(x, pos_to_token, x_sf=None):
    """The float32 rows the cast sees: ``x[pos_to_token[p]]`` (times its cast-back scales
    ``x_sf[t, c // 128]`` with e4m3 x), zeros where the index is negative or ``>= T``."""
    import torch

    t, n = x.shape
    valid = (pos_to_token >= 0) & (pos_to_token < t)
    idx = torch.where(valid, pos_to_token, 0).long()
    xf = x.float()
    if x_sf is not None:
        xf = xf * x_sf.float().repeat_interleave(GROUP, 1)[:, :n]
    if t == 0:
        return xf.new_zeros(pos_to_token.shape[0], n)
    return torch.where(valid[:, None], xf[idx], 0.0)


def reference(x, pos_to_token, x_sf=None, round_sf: bool = False):
    """torch reference, bit-exact for finite x: ``(q [P, N] e4m3fn, scale [ceil(P/128), N]
    float32)``, per_channel_cast_fp8's reference of `gather_values`. TileKernels'
    ``tile_kernels.torch.per_channel_cast_fused(x | (x, x_sf), 128, None | 128, round_sf,
    pos_to_token)`` computes the same bytes (tests/test_kernels_cpu_per_channel_cast_fused.py)."""
    return cast_reference(gather_values(x, pos_to_token, x_sf), round_sf)


SPEC = KernelSpec(
    op="per_channel_cast_fused",
    factory=factory,
    keys=tuple({"dtype": d} for d in IN_DTYPES),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="shared-memory column maxima, no block all-reduce, PDL or arch choice",
    doc="per_channel_cast_fp8 of rows gathered by pos_to_token (-1: zeros), e4m3 rows cast"
    " back by their 128-column scales first, as TileKernels' per_channel_cast_fused.",
)
