"""Per-block cast to FP8 e4m3 (OCP e4m3fn, max 448): one fp32 scale per 128x128 block.

TileKernels 1.0.0's ``per_block_cast(x, "e4m3", (128, 128), round_sf=...)`` with row-major fp32
scales, bit for bit (its reference ``tile_kernels.torch.cast``). For each block of 128 rows x
128 columns (partial blocks at the bottom/right edges)::

    amax  = max(max |x|, 1e-4)          # the floor keeps all-zero blocks finite
    scale = amax / 448  |  2^ceil(log2(amax / 448))     # round_sf = 0 | 1 (runtime scalar)
    inv   = 448 / amax  |  1 / scale
    q     = e4m3(clamp(x * inv, -448, 448))   # round to nearest even, saturating

The same math as ``per_token_cast_fp8`` (``quotient.py``): fp32, IEEE divisions once per block,
one multiply per element. ``scale`` is ``[ceil(M/128), ceil(N/128)]``.

Kernel: one CTA (256 threads) per 128x128 block, SIMT-style so the code is what we write.
Thread ``t`` owns one 16-byte column vector (8 bf16/fp16 or 4 fp32) of every 16th (8th for
fp32) row of the block: 8 (16) independent 16-byte loads in flight per thread, kept in the
input dtype (64 elements in 32 registers for 16-bit inputs). Then a per-thread |x| max, a warp
shuffle max and 8 partial maxima through shared memory; the quantised block is written from
registers (8- or 4-byte fp8 stores, a warp writes whole 128-byte row segments). x is read once
and q written once. ``__launch_bounds__(256, 3)`` (2 for fp32) caps registers at 80 (128) so
3 (2) CTAs, 96 (128) KB of loads, are in flight per SM. Grid: ``(ceil(N/128), ceil(M/128))``
(column blocks fastest; no integer division in the kernel); gridDim.y stops at 65535, so the
wrapper splits calls of more than 65535 row blocks (M > 8,388,480) into several launches.
A runtime branch takes the vector path when N is a multiple of the vector (rows stay 16-byte
aligned) and element-wise access otherwise; static N ({2048, 4096, 7168}) only the former.

Non-finite x (no TileKernels semantics: its kernel and reference disagree): a NaN element
becomes NaN in q and its block is cast as if it were 0 (the |x| max ignores NaN); with
round_sf=0 a block holding ±Inf gets an Inf scale and multiplier 0, so NaN at the Inf and ±0
elsewhere. The reference (torch) propagates NaN into the scale. Finite inputs are exact.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..spec import ALL_CUDA_SAME, KernelSpec
from .quotient import inv_of, reference_scale_and_inv, scale_of

DTYPES = ("bfloat16", "float16", "float32")
FP8 = "float8_e4m3fn"  # OCP e4m3fn (torch.float8_e4m3fn)
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}
FP8_MAX = 448.0
AMAX_FLOOR = 1e-4
BLOCK = 128  # scale block: BLOCK x BLOCK elements
THREADS = 256  # power of two; 8 warps
STATIC_N = (2048, 4096, 7168)
# CTAs per SM the register budget must allow (__launch_bounds__): without it nvcc spends up to
# 140 registers on ILP and one CTA (32 KB of loads) per SM is all that fits; 4 would spill.
MIN_BLOCKS = {"bfloat16": 3, "float16": 3, "float32": 2}


def factory(arch: str, dtype: str, N: int | None = None):
    """TileLang prim_func ``(x[M, N], q[M, N] e4m3fn, scale[ceil(M/128), ceil(N/128)] fp32,
    round_sf int32)``; ``round_sf`` non-zero: power-of-two scales. ``arch`` does not change
    the code.
    """
    if dtype not in DTYPES:
        raise ValueError(f"per_block_cast_fp8: unsupported dtype {dtype!r}")
    import tilelang.language as T

    vec = 16 // ITEMSIZE[dtype]  # elements per 16-byte vector
    M = T.dynamic("M")
    n_dim = T.dynamic("N") if N is None else N
    vec_block = _block_macro(T, dtype, M, n_dim, vec, aligned=True)
    scalar_block = _block_macro(T, dtype, M, n_dim, vec, aligned=False)

    @T.prim_func
    def per_block_cast_fp8(
        x: T.Tensor((M, n_dim), dtype),
        q: T.Tensor((M, n_dim), FP8),
        scale: T.Tensor((T.ceildiv(M, BLOCK), T.ceildiv(n_dim, BLOCK)), "float32"),
        round_sf: T.int32,
    ):
        with T.Kernel(T.ceildiv(n_dim, BLOCK), T.ceildiv(M, BLOCK), threads=THREADS) as (bn, bm):
            T.annotate_min_blocks_per_sm(MIN_BLOCKS[dtype])
            if N is not None:
                vec_block(x, q, scale, round_sf, bm, bn)
            elif n_dim % vec == 0:
                # Rows start 16-byte aligned (the base pointer is): 16-byte vector access.
                T.assume(n_dim % vec == 0)
                vec_block(x, q, scale, round_sf, bm, bn)
            else:
                scalar_block(x, q, scale, round_sf, bm, bn)

    return per_block_cast_fp8


def _block_macro(T, dtype: str, M, N, vec: int, aligned: bool):
    """Macro quantising the 128x128 block (bm, bn).

    ``aligned``: N % vec == 0, so a thread's vector is wholly inside or outside the matrix and
    is moved as one 16-byte access; otherwise element by element with a bound check each.
    """
    per_row = BLOCK // vec  # threads per row
    rows_step = THREADS // per_row  # rows per step
    steps = BLOCK // rows_step  # vectors per thread
    warps = THREADS // 32
    load, store = vector_io(T, dtype, M, N, vec, steps, rows_step, aligned)

    @T.macro
    def quantise_block(x, q, scale, round_sf, bm, bn):
        tx = T.get_thread_binding()
        buf = T.alloc_local((steps * vec,), dtype)
        yq = T.alloc_local((vec,), "float32")
        q8 = T.alloc_local((vec,), FP8)
        partial = T.alloc_shared((warps,), "float32")
        amax = T.alloc_var("float32")
        s = T.alloc_var("float32")
        inv = T.alloc_var("float32")
        col = bn * BLOCK + (tx % per_row) * vec
        row0 = bm * BLOCK + tx // per_row
        load(x, buf, row0, col)
        # amax of the block: thread, warp (shuffles), then the 8 warps through shared memory.
        amax = T.float32(0)
        for k in T.unroll(steps * vec):
            amax = T.max(amax, T.abs(T.cast(buf[k], "float32")))
        amax = T.warp_reduce_max(amax)
        if tx % 32 == 0:
            partial[tx // 32] = amax
        T.sync_threads()
        for w in T.unroll(warps):
            amax = T.max(amax, partial[w])
        s = scale_of(T, T.max(amax, AMAX_FLOOR), FP8_MAX, round_sf)
        if tx == 0:
            scale[bm, bn] = s
        inv = inv_of(T, T.max(amax, AMAX_FLOOR), s, FP8_MAX, round_sf)
        # Quantise from registers: y = RN(x * inv).
        for i in T.unroll(steps):
            for v in T.unroll(vec):
                yq[v] = T.ieee_mul(T.cast(buf[i * vec + v], "float32"), inv)
            # fp32 -> e4m3 in pairs (__nv_cvt_float2_to_fp8x2, RN, satfinite): a vectorised
            # cast; a scalar one would go through cutlass's own conversion.
            for v in T.vectorized(vec):
                q8[v] = yq[v]
            store(q, q8, row0 + i * rows_step, col)

    return quantise_block


def vector_io(T, dtype: str, M, N, vec: int, steps: int, rows_step: int, aligned: bool):
    """Macros ``load(x, buf, row0, col)`` and ``store(q, q8, row, col)`` of the 2-D casts'
    thread layout: a thread owns the ``vec`` columns from ``col`` of rows ``row0 + i *
    rows_step`` (``i < steps``), held in ``buf[steps * vec]``; what lies outside ``[M, N]``
    loads as 0 and is not stored.

    ``aligned``: N % vec == 0, so a thread's vector is wholly inside or outside the matrix and
    is moved as one 16-byte access; otherwise element by element with a bound check each.
    """
    zero = T.cast(0, dtype)

    @T.macro
    def load(x, buf, row0, col):
        # Every vector of this thread before any use (steps loads in flight).
        for i in T.unroll(steps):
            if aligned:
                if (row0 + i * rows_step < M) & (col < N):
                    for v in T.vectorized(vec):
                        buf[i * vec + v] = x[row0 + i * rows_step, col + v]
                else:
                    for v in T.vectorized(vec):
                        buf[i * vec + v] = zero
            else:
                for v in T.unroll(vec):
                    buf[i * vec + v] = T.if_then_else(
                        (row0 + i * rows_step < M) & (col + v < N),
                        x[row0 + i * rows_step, col + v],
                        zero,
                    )

    @T.macro
    def store(q, q8, row, col):
        if aligned:
            if (row < M) & (col < N):
                for v in T.vectorized(vec):
                    q[row, col + v] = q8[v]
        else:
            for v in T.unroll(vec):
                if (row < M) & (col + v < N):
                    q[row, col + v] = q8[v]

    return load, store


def reference(x, round_sf: bool = False):
    """torch reference, bit-exact for finite x: ``(q [M, N] e4m3fn, scale [ceil(M/128),
    ceil(N/128)] float32)``; ``round_sf``: the power-of-two scales (the kernel's scalar).
    TileKernels' ``tile_kernels.torch.cast(x, "e4m3", (128, 128), round_sf=round_sf)`` computes
    the same bytes (tests/test_parity_quant.py)."""
    import torch
    import torch.nn.functional as F

    m, n = x.shape
    bm, bn = -(-m // BLOCK), -(-n // BLOCK)
    xf = x.float()
    # |x| max over 128 rows, then over 128 columns; zero padding changes no max.
    rows = F.pad(xf.abs(), (0, 0, 0, bm * BLOCK - m)).view(bm, BLOCK, n).amax(dim=1)
    amax = F.pad(rows, (0, bn * BLOCK - n)).view(bm, bn, BLOCK).amax(dim=2)
    scale, inv = reference_scale_and_inv(amax.clamp(min=AMAX_FLOOR), FP8_MAX, round_sf)
    r = inv.repeat_interleave(BLOCK, 0)[:m].repeat_interleave(BLOCK, 1)[:, :n]
    q = (xf * r).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


SPEC = KernelSpec(
    op="per_block_cast_fp8",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({}, *({"N": n} for n in STATIC_N)),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="q, scale = e4m3fn(x * RN(448/amax)), amax/448 (or its power-of-two ceiling) per"
    " 128x128 block, as TileKernels' per_block_cast; x[M, N] any M, N.",
)
