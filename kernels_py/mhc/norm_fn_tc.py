"""Tensor-core (TF32 ``T.gemm``) kernels of mhc_pre_norm_fn and its backward (not an op).

TileKernels' ``tile_kernels/mhc/norm_fn_kernel.py`` (`tile-kernels` 1.0.0) multiplies on tensor
cores with ``mhc_fn`` (and, in the backward, the mixes' gradient) rounded to TF32 first
(``round_to_tf32``: the float32 bits plus ``0x1000``, the MMA then ignores the low 13 bits);
the bf16 residual is exact in TF32, so every product is exact and only the roundings of the
two rounded operands and the float32 sums differ from float32 math. The kernels here do the
same rounding in the kernel (``tf32``: plus ``0x1000``, the low 13 bits cleared, so the value
does not depend on how an MMA treats them), with every sum in a fixed order:

* ``mul``: blocks of ``BT`` tokens and one of ``SPLITS`` slices of the ``R * ceil(H / BK)``
  column steps (``BK`` columns of one stream each): ``x`` (bf16, converted to float32) and
  ``mhc_fn`` (rounded, zeros past N) staged in shared memory, ``acc[BT, NP] += x @ fn.T`` on
  tensor cores, the sums of squares on the side; the next step's loads are issued before the
  product. Each block writes its slice's dot products and sums of squares into the scratch
  ``part[SPLITS, M, NP + 1]``.
* ``norm`` (forward): per token, the ``SPLITS`` slices summed in order,
  ``out = d * rsqrt(s / K + eps)``.
* ``grad_norm`` (backward): the same sums, then ``gd = g * rms`` and ``gs = -(sum_n g d) *
  rms / (s + eps K) / 2`` into ``stats[M, N + 1]`` (TileKernels' ``_mhc_pre_norm_fn_bwd_norm``).
* ``grad_mul`` (backward): per block of ``BH`` columns of one stream, every token in tiles of
  ``BT3``: ``fn_grad[NP, BH] += gd.T @ x`` and ``x_grad = gd @ fn + 2 x gs`` (two T.gemm,
  ``gd`` rounded to TF32), tokens in order: ``mhc_fn_grad`` needs no partial sums.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv

THREADS = 128
NP = 32  # mixes padded to the MMA's width (TileKernels pads to 32 too)
W = NP + 1  # a token's slice in `part`: NP dot products, then the sum of squares
BT = 32  # tokens per block of `mul`
BK = 128  # columns per step of `mul`
SPLITS = 16  # column slices of `mul` (each block sums one; `norm` adds them in order)
BT3 = 64  # tokens per step of `grad_mul`
BH = 128  # columns per block of `grad_mul`
XV = BT * BK // (THREADS * 8)  # 16-byte x vectors per thread and step of `mul`
FV = NP * BK // (THREADS * 4)  # 16-byte mhc_fn vectors per thread and step
GV = BT3 * BH // (THREADS * 8)  # x vectors per thread and step of `grad_mul`
TOKENS_PER_NORM_BLOCK = THREADS // NP  # `norm`: a warp per token, a lane per mix
# TF32 mma.sync from sm_80 on, one source (verify-lowering-classes); the CUDA-core loop before.
LOWERING_CLASSES = (("sm_70", "sm_75"), ("sm_80", "sm_90a", "sm_100f", "sm_120f"))


def tf32(T, v):
    """`v` (float32) rounded to TF32 as TileKernels' ``round_to_tf32`` (bits + 0x1000), the
    13 low bits cleared."""
    bits = T.reinterpret(v, "int32") + T.int32(0x1000)
    return T.reinterpret(T.bitwise_and(bits, T.int32(-8192)), "float32")


class Kernels:
    """The four launches' macros for the sizes ``(M, R, H, N)`` (N an int when static)."""

    def __init__(self, T, M, R, H, N):
        self.mul, self.norm, self.grad_norm, self.grad_mul = _macros(T, M, R, H, N)


def _macros(T, M, R, H, N):  # noqa: C901 (one closure per launch)

    @T.macro
    def _x_vectors(residual, xr, r, t0, c0, tx, vectors):
        """Thread `tx`'s x vectors of the tile ``residual[t0 .., r, c0 .. c0 + 127]`` into `xr`
        (vector q: row ``tx // 16 + 8 q``, columns ``(tx % 16) * 8 ..``; zeros outside)."""
        col = c0 + (tx % 16) * 8
        for q in T.unroll(vectors):
            t = t0 + tx // 16 + 8 * q
            if H % 8 == 0:
                T.assume(H % 8 == 0)  # rows start 16-byte aligned: vector loads
                for e in T.vectorized(8):
                    xr[q, e] = T.if_then_else(
                        (t < M) & (col < H), residual[t, r, col + e], T.bfloat16(0)
                    )
            else:
                for e in T.unroll(8):
                    xr[q, e] = T.if_then_else(
                        (t < M) & (col + e < H), residual[t, r, col + e], T.bfloat16(0)
                    )

    @T.macro
    def _fn_tile(mhc_fn, fr, r, c0, tx):
        """Thread `tx`'s part of ``mhc_fn[:, r, c0 .. c0 + 127]`` into `fr` (vector q: mix ``tx //
        32 + 4 q``, columns ``(tx % 32) * 4 ..``; zeros past N and H)."""
        col = c0 + (tx % 32) * 4
        for q in T.unroll(FV):
            n = tx // 32 + 4 * q
            if H % 8 == 0:
                T.assume(H % 8 == 0)
                for e in T.vectorized(4):
                    fr[q, e] = T.if_then_else(
                        (n < N) & (col < H), mhc_fn[n, r, col + e], T.float32(0)
                    )
            else:
                for e in T.unroll(4):
                    fr[q, e] = T.if_then_else(
                        (n < N) & (col + e < H), mhc_fn[n, r, col + e], T.float32(0)
                    )

    @T.macro
    def _fn_store(fr, fs, tx):
        """`fr` (from _fn_tile) rounded to TF32 into the shared tile ``fs[NP, 128]``."""
        for q in T.unroll(FV):
            for e in T.unroll(4):
                fs[tx // 32 + 4 * q, (tx % 32) * 4 + e] = tf32(T, fr[q, e])

    @T.macro
    def mul_kernel(residual, mhc_fn, part):
        """The `mul` launch (module docstring): ``part[sp, t, n] = x . fn`` over split `sp`'s
        columns for n < NP (zeros past N), ``part[sp, t, NP] = sum x**2`` there."""
        nb = ceildiv(T, M, BT)
        with T.Kernel(nb * SPLITS, threads=THREADS) as b:
            tx = T.get_thread_binding()
            t0 = T.truncmod(b, nb) * BT
            sp = T.truncdiv(b, nb)
            nc = T.ceildiv(H, BK)
            per = T.ceildiv(R * nc, SPLITS)
            s0 = sp * per
            count = T.max(T.min(per, R * nc - s0), 0)
            xs = T.alloc_shared((BT, BK), "float32")
            fs = T.alloc_shared((NP, BK), "float32")
            acc = T.alloc_fragment((BT, NP), "float32")
            xr = T.alloc_local((XV, 8), "bfloat16")
            fr = T.alloc_local((FV, 4), "float32")
            sq = T.alloc_local((XV,), "float32")
            T.clear(acc)
            for q in T.unroll(XV):
                sq[q] = T.float32(0)
            if count > 0:
                _x_vectors(residual, xr, T.truncdiv(s0, nc), t0, T.truncmod(s0, nc) * BK, tx, XV)
                _fn_tile(mhc_fn, fr, T.truncdiv(s0, nc), T.truncmod(s0, nc) * BK, tx)
            for i in T.serial(count):
                for q in T.unroll(XV):
                    for e in T.unroll(8):
                        v = T.cast(xr[q, e], "float32")
                        xs[tx // 16 + 8 * q, (tx % 16) * 8 + e] = v
                        sq[q] = sq[q] + v * v
                _fn_store(fr, fs, tx)
                T.sync_threads()
                if i + 1 < count:  # the next step's loads in flight during the product
                    s = s0 + i + 1
                    _x_vectors(residual, xr, T.truncdiv(s, nc), t0, T.truncmod(s, nc) * BK, tx, XV)
                    _fn_tile(mhc_fn, fr, T.truncdiv(s, nc), T.truncmod(s, nc) * BK, tx)
                T.gemm(xs, fs, acc, transpose_B=True)
                T.sync_threads()
            for q in T.unroll(XV):  # a row's 16 threads: lanes of one half warp
                for k in T.unroll(4):
                    sq[q] = sq[q] + T.shfl_xor(sq[q], T.shift_left(1, 3 - k))
            for i, j in T.Parallel(BT, NP):
                if t0 + i < M:
                    part[sp, t0 + i, j] = acc[i, j]
            if tx % 16 == 0:
                for q in T.unroll(XV):
                    if t0 + tx // 16 + 8 * q < M:
                        part[sp, t0 + tx // 16 + 8 * q, NP] = sq[q]

    @T.macro
    def split_sums(part, t, n, ds):
        """``ds[0] = sum_sp part[sp, t, n]``, ``ds[1] = sum_sp part[sp, t, NP]`` (sp in order)."""
        ds[0] = T.float32(0)
        ds[1] = T.float32(0)
        for sp in T.unroll(SPLITS):
            ds[0] = ds[0] + part[sp, t, n]
            ds[1] = ds[1] + part[sp, t, NP]

    @T.macro
    def norm_kernel(part, out, mhc_norm_eps):
        """The forward's `norm` launch: ``out[t, n] = d * rsqrt(s / K + eps)``."""
        with T.Kernel(ceildiv(T, M, TOKENS_PER_NORM_BLOCK), threads=THREADS) as b:
            tx = T.get_thread_binding()
            t = b * TOKENS_PER_NORM_BLOCK + tx // NP
            n = tx % NP
            ds = T.alloc_local((2,), "float32")
            if t < M:
                split_sums(part, t, n, ds)
                if n < N:
                    out[t, n] = ds[0] * T.rsqrt(ds[1] / T.cast(R * H, "float32") + mhc_norm_eps)

    @T.macro
    def grad_norm_kernel(out_grad, part, stats, mhc_norm_eps):
        """The backward's `norm` launch: ``stats[t, n] = gd[n]`` (n < N), ``stats[t, N] = gs``."""
        with T.Kernel(ceildiv(T, M, TOKENS_PER_NORM_BLOCK), threads=THREADS) as b:
            tx = T.get_thread_binding()
            t = b * TOKENS_PER_NORM_BLOCK + tx // NP
            n = tx % NP
            ds = T.alloc_local((2,), "float32")
            dg = T.alloc_local((1,), "float32")
            if t < M:  # a whole warp: t is the warp's token
                split_sums(part, t, n, ds)
                k = T.cast(R * H, "float32")
                rms = T.rsqrt(ds[1] / k + mhc_norm_eps)
                g = T.if_then_else(n < N, out_grad[t, T.min(n, N - 1)], T.float32(0))
                dg[0] = g * ds[0]
                for s in T.unroll(5):  # sum_n g[n] * d[n]: a butterfly, the same order every run
                    dg[0] = dg[0] + T.shfl_xor(dg[0], T.shift_left(1, 4 - s))
                if n < N:
                    stats[t, n] = g * rms
                if n == 0:
                    stats[t, N] = dg[0] * rms / (ds[1] + mhc_norm_eps * k) / T.float32(-2)

    @T.macro
    def grad_mul_kernel(residual, mhc_fn, stats, residual_grad, mhc_fn_grad):
        """The backward's `grad_mul` launch (module docstring)."""
        nh = ceildiv(T, H, BH)
        with T.Kernel(R * nh, threads=THREADS) as b:
            tx = T.get_thread_binding()
            h0 = T.truncmod(b, nh) * BH
            rb = T.truncdiv(b, nh)
            fs = T.alloc_shared((NP, BH), "float32")
            xs = T.alloc_shared((BT3, BH), "float32")
            gs = T.alloc_shared((BT3, NP), "float32")
            gss = T.alloc_shared((BT3,), "float32")
            fg = T.alloc_fragment((NP, BH), "float32")
            xg = T.alloc_fragment((BT3, BH), "float32")
            xr = T.alloc_local((GV, 8), "bfloat16")
            fr = T.alloc_local((FV, 4), "float32")
            steps = T.ceildiv(M, BT3)
            _fn_tile(mhc_fn, fr, rb, h0, tx)
            _fn_store(fr, fs, tx)
            T.clear(fg)
            _x_vectors(residual, xr, rb, 0, h0, tx, GV)
            for p in T.serial(steps):
                t0 = p * BT3
                for q in T.unroll(GV):
                    for e in T.unroll(8):
                        xs[tx // 16 + 8 * q, (tx % 16) * 8 + e] = T.cast(xr[q, e], "float32")
                for q in T.unroll(BT3 * NP // THREADS):
                    i = (q * THREADS + tx) // NP
                    n = (q * THREADS + tx) % NP
                    gs[i, n] = tf32(
                        T,
                        T.if_then_else(
                            (t0 + i < M) & (n < N),
                            stats[T.min(t0 + i, M - 1), T.min(n, N - 1)],
                            T.float32(0),
                        ),
                    )
                if tx < BT3:
                    gss[tx] = T.if_then_else(
                        t0 + tx < M, stats[T.min(t0 + tx, M - 1), N], T.float32(0)
                    )
                T.sync_threads()
                if p + 1 < steps:  # the next tile's x in flight during the products
                    _x_vectors(residual, xr, rb, t0 + BT3, h0, tx, GV)
                T.gemm(gs, xs, fg, transpose_A=True)
                T.gemm(gs, fs, xg, clear_accum=True)
                for i, j in T.Parallel(BT3, BH):
                    if (t0 + i < M) & (h0 + j < H):
                        residual_grad[t0 + i, rb, h0 + j] = T.cast(
                            xg[i, j] + T.float32(2) * xs[i, j] * gss[i], "bfloat16"
                        )
                T.sync_threads()
            for i, j in T.Parallel(NP, BH):
                if (i < N) & (h0 + j < H):
                    mhc_fn_grad[i, rb, h0 + j] = fg[i, j]

    return mul_kernel, norm_kernel, grad_norm_kernel, grad_mul_kernel
