"""SwiGLU: ``y = silu(x[:, :H]) * x[:, H:]`` with ``silu(a) = a / (1 + exp(-a))``.

The gate (first half of each row) and the up projection (second half) are packed in one
tensor ``x[M, 2H]``, as a fused gate/up GEMM writes them; ``y`` is ``[M, H]`` in x's dtype.
Math is fp32; each element is::

    y = RN_out( (g / (1 + expf(-g))) * u )        # g, u upcast to fp32

with the accurate (libdevice) ``expf``, an IEEE division (``__fdiv_rn``) and a separate
multiply: the operations torch's CUDA kernels perform for ``g / (1 + torch.exp(-g)) * u``,
so ``reference`` on a CUDA tensor reproduces the kernel bit for bit (``T.exp`` would emit the
approximate ``__expf``). The exact silu costs ~20 of the kernel's ~28 SASS instructions per
element (sm_90a): still memory-bound at 6 bytes per element on A100/H100/H200 (a B200's
bandwidth would need a fast-math silu, as swiglu_per_token_cast_fp8 uses).

Memory-bound (one read of x, one write of y). Each thread of a 128-thread block loads
``ROWS`` 16-byte vectors of the gate and ``ROWS`` of the up half (all loads issued before any
math; ``vec`` = elements per vector: 8 for bf16/fp16, 4 for fp32), computes in registers and
stores ``ROWS`` 16-byte vectors of y.

* Static H that the column tile (``128 * vec`` outputs) divides (2048, 4096, 7168, ...): a
  block owns ``ROWS`` rows x one tile, grid ``ceil(M / ROWS) x H / tile``; constant strides,
  no column predicate.
* Other static H (1408, 1536, ...) and generic H (``{}``, M and H dynamic): a block owns
  ``ROWS * 128`` consecutive vectors of y in row-major order on flat views of x and y, grid
  ``ceil(M * H / (ROWS * 128 * vec))``, so no thread idles in a row's partial last tile
  (_flat_tile). Generic H picks at run time 16-byte vectors when ``H % vec == 0`` and
  element access otherwise, so any H works; the element path takes its ROWS x vec elements
  in ``vec`` rolled chunks of ROWS (_flat_scalar_tile), so that it needs no more registers
  than the vector path it shares the kernel with.

On CUDA targets the vector path is written per thread so that each output vector leaves in
one explicit 16-byte store (``st.global.v4``, inline PTX): TileLang's plain vector store came
out of NVRTC 12.9 for sm_90a as four 4-byte stores for some vectors. HIP keeps the plain store
(TileLang cannot lower this op for HIP today, docs/HIP.md).

Loops touching global memory carry ``coalesced_width`` = one 16-byte vector (sm_100a would
otherwise get 32-byte accesses, see docs/ADDING_AN_OP.md).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec

DTYPES = ("bfloat16", "float16", "float32")
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}
# Specialised intermediate sizes H (y's width; x is 2H wide). 2048 is DeepSeek-V3/R1's MoE
# expert size (moe_intermediate_size), 4096 and 7168 the project's common sizes (and what the
# other ops specialise). Other sizes take the generic kernel, which differs only by a
# per-vector column predicate and runtime strides.
STATIC_H = (2048, 4096, 7168)
# The served (moe_)intermediate_size / shared-expert widths of the model zoo
# (examples/models, SOURCES.md) beyond STATIC_H, specialised for bf16 only (every zoo model
# runs bf16 activations): Qwen3-Next 512, Qwen3-30B-A3B 768, DeepSeek-V2-Lite / Qwen1.5-MoE
# 1408, GLM-4.5 / Qwen3-235B 1536, Qwen2-57B 2560, DeepSeek-V2-Lite 2816 (2 shared experts)
# and 10944, Qwen1.5-MoE 5632, Phi-3.5-MoE 6400, GLM-4.5 12288, Llama-3-8B / Mixtral-8x7B
# 14336, Mixtral-8x22B 16384, DeepSeek-V3 18432, Qwen2-57B 20480, Llama-3-70B 28672.
ZOO_H = (512, 768, 1408, 1536, 2560, 2816, 5632, 6400, 10944, 12288, 14336, 16384, 18432)
ZOO_H += (20480, 28672)
ZOO_DTYPES = ("bfloat16",)

THREADS = 128
ROWS = 4  # rows per block: 2 x ROWS 16-byte loads in flight per thread


def factory(arch: str, dtype: str, H: int | None = None):
    """TileLang prim_func ``(x[M, 2H], y[M, H])``.

    ``arch`` does not change the code, except that the explicit 16-byte stores (inline PTX)
    apply to CUDA targets only.
    """
    if dtype not in DTYPES:
        raise ValueError(f"swiglu: unsupported dtype {dtype!r}")
    vec = 16 // ITEMSIZE[dtype]
    if H is not None and H % vec:
        raise ValueError(f"swiglu: static H={H} must be a multiple of {vec} for {dtype}")
    return _kernel(dtype, H, store_128=arch.startswith("sm_"))


def _supports(arch: str, key, spec) -> bool:
    """The zoo's extra sizes (ZOO_H) are built for ZOO_DTYPES only."""
    return spec.get("H") not in ZOO_H or key["dtype"] in ZOO_DTYPES


def silu_mul(T, g, u):
    """fp32 ``g / (1 + expf(-g)) * u``: accurate expf and IEEE division, as torch on CUDA."""
    return T.ieee_fdiv(g, 1.0 + T.call_extern("float32", "expf", -g)) * u


def _kernel(dtype: str, h: int | None, store_128: bool):
    import tilelang.language as T

    vec = 16 // ITEMSIZE[dtype]
    cols = THREADS * vec  # one 16-byte vector per thread and row
    M = T.dynamic("M")
    H = T.dynamic("H") if h is None else h
    if h is not None and h % cols == 0:
        return _tiled_kernel(T, dtype, M, h, vec, store_128)
    flat_vec = _flat_tile(T, M, H, vec, dtype, store_128)
    flat_scalar = _flat_scalar_tile(T, M, H, vec)

    @T.prim_func
    def swiglu(
        x: T.Tensor((M, 2 * H), dtype),
        y: T.Tensor((M, H), dtype),
    ):
        # One block per THREADS * ROWS vectors of y in row-major order (M * H < 2^30: the
        # wrapper refuses 2^31 elements of x), on gridDim.x (up to 2^31 - 1).
        with T.Kernel(ceildiv(T, M * H, THREADS * ROWS * vec), threads=THREADS) as b:
            xf = T.view(x, (M * 2 * H,))
            yf = T.view(y, (M * H,))
            if h is not None:
                flat_vec(xf, yf, b)
            elif H % vec == 0:
                # Rows of x and y start 16-byte aligned: tell the vectoriser.
                T.assume(H % vec == 0)
                flat_vec(xf, yf, b)
            else:
                flat_scalar(xf, yf, b)

    return swiglu


def _tiled_kernel(T, dtype: str, M, h: int, vec: int, store_128: bool):
    """Static H that is a multiple of the column tile: ROWS rows x one tile per block, every
    thread busy, no column predicate."""
    cols = THREADS * vec
    vec_tile = _tile(T, M, h, vec, T.int32(vec), dtype if store_128 else None)

    @T.prim_func
    def swiglu(
        x: T.Tensor((M, 2 * h), dtype),
        y: T.Tensor((M, h), dtype),
    ):
        # Rows on gridDim.x (up to 2^31 - 1); gridDim.y (65535) would cap M at 262,140.
        with T.Kernel(ceildiv(T, M, ROWS), h // cols, threads=THREADS) as (bm, bc):
            vec_tile(x, y, bc, bm)

    return swiglu


def _flat_tile(T, M, H, vec: int, dtype: str, store_128: bool):
    """Macro for H a multiple of ``vec`` (static, or generic with ``H % vec == 0``) on flat
    views of x and y: block ``b`` computes ROWS x THREADS consecutive 16-byte vectors of y.

    Why flat: a (row, column tile) grid leaves threads idle in each row's last tile unless
    the tile (1024 bf16 columns) divides H (H = 1400: two tiles, 68 % of threads busy; the
    ncu probe of 2026-12-02 had that generic variant at 35 % of DRAM bandwidth). Here vector
    ``i = (b * ROWS + k) * THREADS + tx`` of y (``nv = H / vec`` per row) is y's flat vector
    ``i`` and x's gate vector ``i + row * nv`` (x rows hold 2 nv vectors), its up vector
    ``nv`` further: a warp touches 32 consecutive vectors whatever H is, with one int32
    division per vector (``row * nv`` is bound to a register, so TileLang neither widens the
    division to int64 nor loses the proof that offsets are multiples of ``vec``) and one
    predicate, ``i < M * nv``. Each thread issues its 2 x ROWS 16-byte loads before any
    math, as the tiled path does.
    """
    nv = H // vec
    total = M * nv

    @T.macro
    def flat(xf, yf, b):
        tx = T.get_thread_binding()
        xg = T.alloc_local((ROWS * vec,), dtype)
        xu = T.alloc_local((ROWS * vec,), dtype)
        acc = T.alloc_local((ROWS * vec,), "float32")
        yo = T.alloc_local((vec,), dtype)  # one output vector, rounded: 16 bytes
        skip = T.alloc_local((ROWS,), "int32")  # row * nv of each of the thread's vectors
        for k in T.unroll(ROWS):
            i = (b * ROWS + k) * THREADS + tx
            skip[k] = T.truncdiv(i, nv) * nv
        for k in T.unroll(ROWS):
            i = (b * ROWS + k) * THREADS + tx
            for e in T.vectorized(vec):
                xg[k * vec + e] = T.if_then_else(i < total, xf[(i + skip[k]) * vec + e], 0)
        for k in T.unroll(ROWS):
            i = (b * ROWS + k) * THREADS + tx
            for e in T.vectorized(vec):
                xu[k * vec + e] = T.if_then_else(i < total, xf[(i + skip[k] + nv) * vec + e], 0)
        for j in T.unroll(ROWS * vec):
            acc[j] = silu_mul(T, T.cast(xg[j], "float32"), T.cast(xu[j], "float32"))
        for k in T.unroll(ROWS):
            i = (b * ROWS + k) * THREADS + tx
            for e in T.vectorized(vec):
                yo[e] = T.cast(acc[k * vec + e], dtype)
            if i < total:
                if store_128:  # one st.global.v4 per vector (see tile_store_128)
                    bits = T.view(yo, (4,), "uint32")
                    T.stg128(yf[i * vec], bits.vload([0], "uint32x4"))
                else:
                    for e in T.vectorized(vec):
                        yf[i * vec + e] = yo[e]

    return flat


def _tile(T, M, H: int, vec: int, width, store_128: str | None = None):
    """Macro computing a ROWS x (THREADS * vec) tile of y with 16-byte vector accesses, for
    a static H that the tile divides (no column predicate).

    Loops run over (row, vector, element). ``width`` (an IntImm) is bound here, since a
    macro argument would reach the loop as a non-constant. ``store_128`` (y's dtype, CUDA
    only) stores each 16-byte output vector with one explicit ``st.global.v4``; without it
    (HIP) T.Parallel loops do.
    """
    cols = THREADS * vec

    def inside(bm, r):  # the tile divides H: only the row needs a guard
        return bm * ROWS + r < M

    @T.macro
    def tile_store_128(x, y, bc, bm):
        # The vector path written per thread (thread tx owns vector tx of each row, as in the
        # T.Parallel tile), so that each output vector leaves in one explicit st.global.v4 =
        # one STG.E.128. TileLang's own `*(uint4*)(y + int64 index) = ...` came out of
        # NVRTC 12.9 for sm_90a as four 4-byte STGs for one of the four vectors (static H) or
        # all four (generic H); cast_back_fp8 and moe_expand store the same way. Same bytes,
        # addresses and guards as the T.Parallel tile.
        tx = T.get_thread_binding()
        xg = T.alloc_local((ROWS * vec,), store_128)
        xu = T.alloc_local((ROWS * vec,), store_128)
        yf = T.alloc_local((ROWS * vec,), "float32")
        yo = T.alloc_local((vec,), store_128)  # one output vector, rounded: 16 bytes
        yo_bits = T.view(yo, (4,), "uint32")
        col = bc * cols + tx * vec
        # All loads issued before any math; separate loops as in the T.Parallel tile.
        for r in T.unroll(ROWS):
            for e in T.vectorized(vec):
                xg[r * vec + e] = T.if_then_else(inside(bm, r), x[bm * ROWS + r, col + e], 0)
        for r in T.unroll(ROWS):
            for e in T.vectorized(vec):
                xu[r * vec + e] = T.if_then_else(inside(bm, r), x[bm * ROWS + r, H + col + e], 0)
        for i in T.unroll(ROWS * vec):
            yf[i] = silu_mul(T, T.cast(xg[i], "float32"), T.cast(xu[i], "float32"))
        for r in T.unroll(ROWS):
            for e in T.vectorized(vec):
                yo[e] = T.cast(yf[r * vec + e], store_128)
            if inside(bm, r):
                T.stg128(y[bm * ROWS + r, col], yo_bits.vload([0], "uint32x4"))

    @T.macro
    def tile(x, y, bc, bm):
        g = T.alloc_fragment((ROWS, THREADS, vec), "float32")
        u = T.alloc_fragment((ROWS, THREADS, vec), "float32")
        # Two load loops: with both loads in one loop TileLang 0.1.15 halves the vector width.
        for r, v, e in T.Parallel(ROWS, THREADS, vec, coalesced_width=width):
            g[r, v, e] = T.if_then_else(inside(bm, r), x[bm * ROWS + r, bc * cols + v * vec + e], 0)
        for r, v, e in T.Parallel(ROWS, THREADS, vec, coalesced_width=width):
            u[r, v, e] = T.if_then_else(
                inside(bm, r), x[bm * ROWS + r, H + bc * cols + v * vec + e], 0
            )
        for r, v, e in T.Parallel(ROWS, THREADS, vec):
            g[r, v, e] = silu_mul(T, g[r, v, e], u[r, v, e])
        for r, v, e in T.Parallel(ROWS, THREADS, vec, coalesced_width=width):
            if inside(bm, r):
                y[bm * ROWS + r, bc * cols + v * vec + e] = g[r, v, e]

    if store_128 is not None:
        return tile_store_128

    return tile


def _flat_scalar_tile(T, M, H, vec: int):
    """Macro for generic H with ``H % vec != 0`` (rows not 16-byte aligned) on flat views:
    the same block of ROWS x THREADS x vec elements of y, one element per access.

    Element ``j = c * ROWS + k`` of thread ``tx`` is y's flat element ``i = (b * ROWS * vec +
    j) * THREADS + tx``, x's gate element ``i + row * H``: a warp reads and writes 32
    consecutive elements. The ``vec`` chunks ``c`` run in a rolled loop (``#pragma unroll 1``),
    each with its 2 x ROWS loads before its math: this path and _flat_tile are one kernel, whose
    register count is the larger of the two, and holding all ROWS x vec elements at once (~128
    registers) had cut the generic kernel's occupancy on the aligned path too (_flat_tile alone
    needs ~54). Written per thread rather than as T.Parallel loops over fragments: under a
    runtime H, TileLang 0.1.15 spent ~3/4 of the generic variant's lowering (LayoutInference
    and LowerTileOp) on those loops (bench/results/build-2026-12-02-tracing.md).
    """
    total = M * H

    @T.macro
    def tile_scalar(xf, yf, b):
        tx = T.get_thread_binding()
        g = T.alloc_local((ROWS,), "float32")
        u = T.alloc_local((ROWS,), "float32")
        skip = T.alloc_local((ROWS,), "int32")  # row * H of each element
        for c in T.unroll(vec, unroll_factor=1):
            for k in T.unroll(ROWS):
                i = (b * ROWS * vec + c * ROWS + k) * THREADS + tx
                skip[k] = T.truncdiv(i, H) * H
            for k in T.unroll(ROWS):
                i = (b * ROWS * vec + c * ROWS + k) * THREADS + tx
                g[k] = T.if_then_else(i < total, xf[i + skip[k]], 0)
            for k in T.unroll(ROWS):
                i = (b * ROWS * vec + c * ROWS + k) * THREADS + tx
                u[k] = T.if_then_else(i < total, xf[i + skip[k] + H], 0)
            for k in T.unroll(ROWS):
                g[k] = silu_mul(T, g[k], u[k])
            for k in T.unroll(ROWS):
                i = (b * ROWS * vec + c * ROWS + k) * THREADS + tx
                if i < total:
                    yf[i] = g[k]

    return tile_scalar


def reference(x, clamp=None):
    """torch reference: fp32 math in the kernel's operation order, result in x's dtype.

    On a CUDA tensor it performs the kernel's operations (``torch.exp`` is libdevice ``expf``,
    tensor division is IEEE), so it matches the kernel bit for bit; on the CPU ``exp`` may
    differ by an ulp. ``clamp`` (this kernel has none; swiglu_per_channel_cast_and_transpose's
    does): DeepSeek-V3's swiglu_limit, gate capped above, up on both sides, before silu.
    """
    import torch

    h = x.shape[-1] // 2
    g = x[..., :h].float()
    u = x[..., h:].float()
    if clamp is not None:
        g = g.clamp(max=clamp)
        u = u.clamp(min=-clamp, max=clamp)
    one = torch.ones((), dtype=torch.float32, device=x.device)
    return (g / (one + torch.exp(-g)) * u).to(x.dtype)


SPEC = KernelSpec(
    op="swiglu",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({}, *({"H": h} for h in STATIC_H), *({"H": h} for h in ZOO_H)),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    supports=_supports,
    doc="y = silu(x[:, :H]) * x[:, H:] (fp32 math); x[M, 2H] -> y[M, H].",
)
