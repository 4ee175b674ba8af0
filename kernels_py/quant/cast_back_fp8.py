"""Dequantise FP8 e4m3 with fp32 scales: ``x = float(q) * scale`` (op "cast_back_fp8").

Exact: e4m3 -> fp32 is exact, the product is one IEEE fp32 multiply (nothing to contract),
and the result is rounded once to the output dtype (bf16: round to nearest even; fp32: as
is). ``reference`` reproduces it bit for bit. Scale layouts, the ones the casts produce:

* ``g128``     scale ``[M, N / 128]``: one per row and 128-column group (``N % 128 == 0``);
* ``g64``, ``g32`` scale ``[M, N / 64]``, ``[M, N / 32]`` alike (``N % 64``, ``N % 32 == 0``);
* ``token``    scale ``[M, 1]``: one per row, any N;
* ``block128`` scale ``[ceil(M / 128), ceil(N / 128)]``: one per 128x128 block, any M, N.

Kernel (the same for every layout but the scale index): a CTA of 256 threads owns 32 rows x
128 columns (one column group; inside one 128-row block; 32 rather than 64 rows: more,
smaller CTAs measured 2 % faster on an H200, bench/results/2026-11-29-h200-tuning.md).
Thread ``t`` moves one vector of ``16 / sizeof(out)`` elements per row step (8 e4m3 -> 8
bf16, or 4 -> 4 fp32), so a warp's loads and stores cover whole contiguous row segments.
All of a thread's fp8 loads (and scales) are issued before the first use, then converted,
multiplied and stored: memory-bound, one read of q, one write of x, the scales from L1.
Each output vector leaves in one explicit 16-byte store (``st.global.v4``, inline PTX in
TileLang's templates, every CUDA arch): TileLang's plain vector copy came out of NVRTC 12.9
for sm_75..sm_90a as four 4-byte stores (sm_100a kept one), and the one store measured
about 2 % faster on an H200 (same tuning record, "Session 5"). One tile per CTA: two or four
row tiles per CTA, software-pipelined, measured no faster there. TileLang cannot lower this
op for HIP (``tl.ieee_mul``, 8-lane vectors; docs/HIP.md): the store needs no HIP variant.
A runtime branch takes the vector path when ``N`` is a multiple of the vector (rows stay
aligned), element-wise access otherwise (``token``/``block128`` with odd N).
Grid: (column groups, row tiles) = ``(ceil(N/128), ceil(M/32))``; the wrapper splits a call
of more than 65535 row tiles into several launches.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..spec import ALL_CUDA_SAME, KernelSpec

OUT_DTYPES = ("bfloat16", "float32")
LAYOUTS = ("g128", "token", "block128", "g32", "g64")
NARROW = {"g32": 32, "g64": 64}  # group widths below the CTA's 128 columns
FP8 = "float8_e4m3fn"
OUT_ITEMSIZE = {"bfloat16": 2, "float32": 4}
GROUP = 128  # g128 group width; block128 block side; the CTA's column span
THREADS = 256
TILE_ROWS = 32  # rows per CTA: divides 128, so a CTA sits inside one 128-row block
# CTAs per SM the register budget must allow (__launch_bounds__): the default lets nvcc take
# 84 registers here, 3 CTAs per SM; 8 CTAs (2048 threads, 32 registers) keep 64 KB of loads
# in flight per SM.
MIN_BLOCKS = 5
MAX_ROW_TILES = 65535  # gridDim.y limit: the wrapper launches at most this many row tiles


def factory(arch: str, out: str, layout: str):
    """TileLang prim_func ``(q[M, N] e4m3fn, scale[...] fp32, x[M, N] out)``.

    ``scale`` is ``[M, N // 128]`` (g128), ``[M, N // 32]``, ``[M, N // 64]`` (g32, g64),
    ``[M, 1]`` (token) or ``[ceil(M/128), ceil(N/128)]`` (block128); ``arch`` does not change
    the code.
    """
    if out not in OUT_DTYPES or layout not in LAYOUTS:
        raise ValueError(f"cast_back_fp8: unsupported key {out!r}, {layout!r}")
    import tilelang.language as T

    vec = 16 // OUT_ITEMSIZE[out]  # elements per 16-byte output vector
    M = T.dynamic("M")
    N = T.dynamic("N")
    scale_shape = {
        "g128": (M, N // GROUP),
        "token": (M, 1),
        "block128": (T.ceildiv(M, GROUP), T.ceildiv(N, GROUP)),
        **{name: (M, N // width) for name, width in NARROW.items()},
    }[layout]
    vec_tile = _tile_macro(T, out, layout, M, N, vec, aligned=True)
    scalar_tile = _tile_macro(T, out, layout, M, N, vec, aligned=False)

    @T.prim_func
    def cast_back_fp8(
        q: T.Tensor((M, N), FP8),
        scale: T.Tensor(scale_shape, "float32"),
        x: T.Tensor((M, N), out),
    ):
        with T.Kernel(T.ceildiv(N, GROUP), T.ceildiv(M, TILE_ROWS), threads=THREADS) as (bn, bm):
            T.annotate_min_blocks_per_sm(MIN_BLOCKS)
            if layout == "g128":
                T.assume(N % GROUP == 0)  # the constraint: rows 128-byte aligned
                vec_tile(q, scale, x, bm, bn)
            elif layout in NARROW:
                # The constraint N % 32 (64) == 0 keeps rows 16-byte aligned; the last CTA
                # may reach past N (the column checks).
                T.assume(N % NARROW[layout] == 0)
                vec_tile(q, scale, x, bm, bn)
            elif N % vec == 0:
                T.assume(N % vec == 0)  # rows start 16-byte aligned: vector access
                vec_tile(q, scale, x, bm, bn)
            else:
                scalar_tile(q, scale, x, bm, bn)

    return cast_back_fp8


def _tile_macro(T, out: str, layout: str, M, N, vec: int, aligned: bool):
    """Macro dequantising rows [bm*32, bm*32+32) x columns [bn*128, bn*128+128).

    ``aligned``: rows start 16-byte aligned, so each thread moves whole vectors; otherwise
    element by element with bounds checks on every column.
    """
    per_row = GROUP // vec  # threads per row
    rows_step = THREADS // per_row
    steps = TILE_ROWS // rows_step  # vectors per thread

    @T.macro
    def dequantise_tile(q, scale, x, bm, bn):
        tx = T.get_thread_binding()
        buf = T.alloc_local((steps * vec,), FP8)
        s = T.alloc_local((steps,), "float32")
        xf = T.alloc_local((vec,), "float32")
        xo = T.alloc_local((vec,), out)  # the output vector, rounded: 16 bytes
        xo_bits = T.view(xo, (4,), "uint32")
        col = bn * GROUP + (tx % per_row) * vec
        row0 = bm * TILE_ROWS + tx // per_row
        if aligned:
            # Issue every load of this thread first: steps fp8 vectors and their scales.
            for i in T.unroll(steps):
                row = row0 + i * rows_step
                if (row < M) & (col < N):
                    for v in T.vectorized(vec):
                        buf[i * vec + v] = q[row, col + v]
                if layout in NARROW:  # a column past N has no scale to read
                    if (row < M) & (col < N):
                        s[i] = _scale_at(layout, scale, row, bm, bn, col)
                elif row < M:
                    s[i] = _scale_at(layout, scale, row, bm, bn, col)
            for i in T.unroll(steps):
                row = row0 + i * rows_step
                # e4m3 -> fp32 in pairs (exact), one fp32 multiply, vectorised cast.
                for v in T.vectorized(vec):
                    xf[v] = T.cast(buf[i * vec + v], "float32")
                for v in T.unroll(vec):
                    xf[v] = T.ieee_mul(xf[v], s[i])  # __fmul_rn: never contracted
                for v in T.vectorized(vec):
                    xo[v] = T.cast(xf[v], out)
                if (row < M) & (col < N):
                    # One explicit st.global.v4 = one STG.E.128. TileLang's own vector copy,
                    # `*(uint4*)(x + int64 index) = ...`, came out of NVRTC 12.9 (sm_75..sm_90a)
                    # and nvcc 13 (sm_90a) as four 4-byte STGs per vector. Measured, bf16
                    # 32768x7168 on an H200: 178.8 -> 175.4 us (g128), 176.9 -> 173.8 us
                    # (block128); bench/results/2026-11-29-h200-tuning.md, "Session 5".
                    T.stg128(x[row, col], xo_bits.vload([0], "uint32x4"))
        else:
            # Rows not aligned (odd N): element by element, one row step at a time.
            for i in T.unroll(steps):
                row = row0 + i * rows_step
                if row < M:
                    s[i] = _scale_at(layout, scale, row, bm, bn, col)
                    for v in T.unroll(vec):
                        if col + v < N:
                            x[row, col + v] = T.ieee_mul(T.cast(q[row, col + v], "float32"), s[i])

    return dequantise_tile


def _scale_at(layout: str, scale, row, tile, bn, col):
    """The scale of `row` in column group `bn` (the thread's vector starts at `col`, inside
    one group of a narrower width); `tile` is the row's TILE_ROWS tile."""
    if layout == "g128":
        return scale[row, bn]
    if layout in NARROW:
        return scale[row, col // NARROW[layout]]
    if layout == "token":
        return scale[row, 0]
    return scale[tile * TILE_ROWS // GROUP, bn]  # a tile lies inside one 128-row block


def expand_scale(scale, m: int, n: int, layout: str):
    """The ``[M, N]`` fp32 scale of every element (torch), for a scale of ``layout``."""
    if layout == "token":
        return scale.reshape(m, 1).expand(m, n)
    if layout == "g128" or layout in NARROW:
        return scale.repeat_interleave(NARROW.get(layout, GROUP), dim=1)
    return scale.repeat_interleave(GROUP, dim=0).repeat_interleave(GROUP, dim=1)[:m, :n]


def reference(q, scale, layout: str, out_dtype=None):
    """torch reference, exact: ``(q.float() * scale broadcast).to(out_dtype)`` (bf16 default)."""
    import torch

    m, n = q.shape
    x = q.float() * expand_scale(scale.float(), m, n, layout)
    return x.to(torch.bfloat16 if out_dtype is None else out_dtype)


def _constraints(key, spec) -> dict[str, int]:
    return {"N": NARROW.get(key["layout"], GROUP)} if key["layout"][0] == "g" else {}


SPEC = KernelSpec(
    op="cast_back_fp8",
    factory=factory,
    keys=tuple({"out": o, "layout": lay} for o in OUT_DTYPES for lay in LAYOUTS),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    constraints=_constraints,
    doc="x = float(q) * scale (e4m3 -> bf16/fp32); per-128/64/32-group, per-token or 128x128"
    " scales.",
)
