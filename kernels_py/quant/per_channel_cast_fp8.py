"""Per-channel cast to FP8 e4m3 (OCP e4m3fn, max 448): one fp32 scale per column per 128 rows.

TileKernels 1.0.0's ``per_channel_cast(x, "e4m3", num_per_tokens=128, round_sf=...)``
(``tile_kernels/quant/per_channel_cast_kernel.py``), bit for bit with its reference
``tile_kernels.torch.cast(x, "e4m3", block_size=(128, 1), round_sf=...)``. For each column
``j`` and each group of 128 rows (a partial group at the bottom edge)::

    amax  = max(max |x[rows, j]|, 1e-4)   # the floor keeps all-zero groups finite
    scale = amax / 448  |  2^ceil(log2(amax / 448))     # round_sf = 0 | 1 (runtime scalar)
    inv   = 448 / amax  |  1 / scale
    q     = e4m3(clamp(x * inv, -448, 448))   # round to nearest even, saturating

The math of the other FP8 casts (``quotient.py``); only the group's shape differs. ``scale``
is ``[ceil(M/128), N]``.

Kernel: one CTA (256 threads) per tile of 128 rows x 128 columns, laid out as
``per_block_cast_fp8``'s: thread ``t`` owns one 16-byte column vector (8 bf16/fp16 or 4 fp32)
of every 16th (8th for fp32) row, all loads in flight before any use, kept in the input dtype.
Each thread takes the |x| max of its vector's columns over its rows; the 16 (8) row slices'
maxima meet in shared memory (``[slices, 128]`` fp32), where thread ``j < 128`` reduces column
``j``, writes its scale (a warp writes 128 contiguous bytes) and its multiplier, and every
thread then quantises its registers with its columns' multipliers. x is read once and q
written once. Grid ``(ceil(N/128), ceil(M/128))``, column tiles fastest; gridDim.y stops at
65535, so the wrapper splits calls of more than 65535 row groups (M > 8,388,480). A runtime
branch takes the vector path when N is a multiple of the vector and element-wise access
otherwise.

Non-finite x (TileKernels' kernel and reference disagree, so it defines none): the |x| max
ignores NaN, so a NaN element is NaN in q and its group is cast as if it were 0; with
round_sf=0 a group holding ±Inf gets an Inf scale and multiplier 0 (NaN at the Inf, ±0
elsewhere), as the reference. Finite inputs are exact.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .per_block_cast_fp8 import AMAX_FLOOR, DTYPES, FP8, FP8_MAX, ITEMSIZE, MIN_BLOCKS, vector_io
from .quotient import inv_of, reference_scale_and_inv, scale_of

ROWS = 128  # rows sharing a scale (TileKernels' num_per_tokens)
COLS = 128  # columns of a CTA's tile
THREADS = 256  # 8 warps; COLS of them reduce a column each


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(x[M, N], q[M, N] e4m3fn, scale[ceil(M/128), N] fp32, round_sf
    int32)``; ``round_sf`` non-zero: power-of-two scales. ``arch`` does not change the code.
    """
    if dtype not in DTYPES:
        raise ValueError(f"per_channel_cast_fp8: unsupported dtype {dtype!r}")
    import tilelang.language as T

    vec = 16 // ITEMSIZE[dtype]  # elements per 16-byte vector
    M, N = T.dynamic("M"), T.dynamic("N")
    vec_tile = _tile_macro(T, dtype, M, N, vec, aligned=True)
    scalar_tile = _tile_macro(T, dtype, M, N, vec, aligned=False)

    @T.prim_func
    def per_channel_cast_fp8(
        x: T.Tensor((M, N), dtype),
        q: T.Tensor((M, N), FP8),
        scale: T.Tensor((T.ceildiv(M, ROWS), N), "float32"),
        round_sf: T.int32,
    ):
        with T.Kernel(ceildiv(T, N, COLS), ceildiv(T, M, ROWS), threads=THREADS) as (bn, bm):
            T.annotate_min_blocks_per_sm(MIN_BLOCKS[dtype])
            if N % vec == 0:
                # Rows start 16-byte aligned (the base pointer is): 16-byte vector access.
                T.assume(N % vec == 0)
                vec_tile(x, q, scale, round_sf, bm, bn)
            else:
                scalar_tile(x, q, scale, round_sf, bm, bn)

    return per_channel_cast_fp8


def _tile_macro(T, dtype: str, M, N, vec: int, aligned: bool):
    """Macro quantising the tile (bm, bn): rows ``bm*128 ...``, columns ``bn*128 ...``.

    ``aligned``: N % vec == 0, so a thread's vector is wholly inside or outside the matrix and
    is moved as one 16-byte access; otherwise element by element with a bound check each.
    """
    steps, slices = tile_layout(vec)
    load, _ = vector_io(T, dtype, M, N, vec, steps, slices, aligned)
    finish = tile_ops(T, M, N, vec, aligned, dtype)

    @T.macro
    def quantise_tile(x, q, scale, round_sf, bm, bn):
        tx = T.get_thread_binding()
        buf = T.alloc_local((steps * vec,), dtype)
        load(x, buf, bm * ROWS + tx // (COLS // vec), bn * COLS + (tx % (COLS // vec)) * vec)
        finish(buf, q, scale, round_sf, bm, bn, tx)

    return quantise_tile


def tile_layout(vec: int) -> tuple[int, int]:
    """``(steps, slices)`` of the tile's thread layout for vectors of ``vec`` columns: thread
    ``tx`` owns columns ``(tx % (128 // vec)) * vec ...`` of rows ``tx // (128 // vec) + i *
    slices``, ``i < steps`` (held in ``buf[steps * vec]``, row i's vector at ``i * vec``)."""
    slices = THREADS // (COLS // vec)
    return ROWS // slices, slices


def tile_ops(T, M, N, vec: int, aligned: bool, dtype: str):
    """Macro ``finish(buf, q, scale, round_sf, bm, bn, tx)``: from thread ``tx``'s loaded
    values ``buf`` (tile_layout's layout, any dtype: taken as float32; 0 outside the
    matrix) the per-column maxima, the scales of tile (bm, bn) and its e4m3 codes, stored to
    ``q[M, N]`` and ``scale``. Shared by per_channel_cast_fp8 and per_channel_cast_fused."""
    per_row = COLS // vec  # threads per row
    steps, slices = tile_layout(vec)
    _, store = vector_io(T, dtype, M, N, vec, steps, slices, aligned)

    @T.macro
    def finish(buf, q, scale, round_sf, bm, bn, tx):
        cmax = T.alloc_local((vec,), "float32")  # then the columns' multipliers
        yq = T.alloc_local((vec,), "float32")
        q8 = T.alloc_local((vec,), FP8)
        partial = T.alloc_shared((slices, COLS), "float32")
        invs = T.alloc_shared((COLS,), "float32")
        amax = T.alloc_var("float32")
        s = T.alloc_var("float32")
        c0 = (tx % per_row) * vec  # the thread's first column in the tile
        col = bn * COLS + c0
        row0 = bm * ROWS + tx // per_row
        # |x| max per column: over this thread's rows, then over the slices in shared memory.
        for v in T.unroll(vec):
            cmax[v] = T.float32(0)
        for i in T.unroll(steps):
            for v in T.unroll(vec):
                cmax[v] = T.max(cmax[v], T.abs(T.cast(buf[i * vec + v], "float32")))
        for v in T.vectorized(vec):
            partial[tx // per_row, c0 + v] = cmax[v]
        T.sync_threads()
        if tx < COLS:
            amax = partial[0, tx]
            for k in T.unroll(slices - 1):
                amax = T.max(amax, partial[k + 1, tx])
            amax = T.max(amax, AMAX_FLOOR)
            s = scale_of(T, amax, FP8_MAX, round_sf)
            if bn * COLS + tx < N:
                scale[bm, bn * COLS + tx] = s
            invs[tx] = inv_of(T, amax, s, FP8_MAX, round_sf)
        T.sync_threads()
        for v in T.vectorized(vec):
            cmax[v] = invs[c0 + v]
        # Quantise from registers: y = RN(x * inv) with each column's multiplier.
        for i in T.unroll(steps):
            for v in T.unroll(vec):
                yq[v] = T.ieee_mul(T.cast(buf[i * vec + v], "float32"), cmax[v])
            # fp32 -> e4m3 in pairs (__nv_cvt_float2_to_fp8x2, RN, satfinite): a vectorised
            # cast; a scalar one would go through cutlass's own conversion.
            for v in T.vectorized(vec):
                q8[v] = yq[v]
            store(q, q8, row0 + i * slices, col)

    return finish


def reference(x, round_sf: bool = False, rows: int = ROWS):
    """torch reference, bit-exact for finite x: ``(q [M, N] e4m3fn, scale [ceil(M/rows), N]
    float32)``; ``round_sf``: the power-of-two scales (the kernel's scalar). TileKernels'
    ``tile_kernels.torch.cast(x, "e4m3", (rows, 1), round_sf=round_sf)`` computes the same bytes
    (tests/test_parity_quant.py). The kernel's ``rows`` is 128 (per_channel_cast_and_transpose
    takes 32 too)."""
    import torch
    import torch.nn.functional as F

    m, n = x.shape
    bm = -(-m // rows)
    xf = x.float()
    # |x| max over each column's row groups; zero padding changes no max.
    amax = F.pad(xf.abs(), (0, 0, 0, bm * rows - m)).view(bm, rows, n).amax(dim=1)
    scale, inv = reference_scale_and_inv(amax.clamp(min=AMAX_FLOOR), FP8_MAX, round_sf)
    q = (xf * inv.repeat_interleave(rows, 0)[:m]).clamp(-FP8_MAX, FP8_MAX)
    return q.to(torch.float8_e4m3fn), scale


SPEC = KernelSpec(
    op="per_channel_cast_fp8",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="shared-memory column maxima, no block all-reduce, PDL or arch choice",
    doc="q, scale = e4m3fn(x * RN(448/amax)), amax/448 (or its power-of-two ceiling) per"
    " column of each 128 rows, as TileKernels' per_channel_cast; x[M, N] any M, N.",
)
