"""mHC pre-norm projection, forward: the RMS-normalised mixes of each token's residual streams.

TileKernels' ``mhc_pre_norm_fn`` (`tile-kernels` 1.0.0: reference
``tile_kernels.torch.mhc.mhc_pre_norm_fn_ref``, kernel ``tile_kernels/mhc/norm_fn_kernel.py``),
per token with ``x = residual[t]`` flattened to ``K = R * H`` values::

    out[t, n] = (sum_k x[k] * mhc_fn[n, k]) * rsqrt(sum_k x[k]**2 / K + eps)

``residual[T, R, H]`` bf16, ``mhc_fn[N, K]`` float32 (N = R * (R + 2) mixes in the models, at
most ``MAX_N`` = 32 as TileKernels' kernel), ``out[T, N]`` float32. Float32 math (TileKernels'
kernel rounds ``mhc_fn`` to TF32 and multiplies on tensor cores; its test holds it to its
float32 reference within ``atol = rtol = 1e-3``, which our float32 sums meet with margin).

A block of 128 threads owns ``ROWS`` tokens and walks their K values in chunks of 1024
columns of one stream (8 per thread: 16-byte loads of x, two of ``mhc_fn``, when ``H % 8 ==
0``; element loads otherwise). Each thread keeps ``ROWS * N`` partial dot products and
``ROWS`` partial sums of squares in registers; at the end a warp butterfly per value and one
pass through shared memory reduce them (a thread's columns in order, then lanes, then warps 0
.. 3), and ``ROWS * N`` threads apply the norm and store. Memory-bound on x (read once);
``mhc_fn`` (2.75 MB at R = 4, H = 7168) is re-read from L2 by every block, so more tokens per
block cut that traffic at the cost of registers.

Variants: N = 24 (R = 4) unrolls the mix loop exactly (ROWS = 4: 96 partials). The generic
variant (N runtime, ``N <= 32``) unrolls to 32 with ``< N`` guards and takes ROWS = 2.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .expand_to_mhc import COLS, THREADS, VEC

MAX_N = 32  # mixes per token (TileKernels' kernel pads them to 32 as well)
STATIC_N = (24,)  # R = 4: 2R + R*R mixes
WARPS = THREADS // 32
ROWS_STATIC = 4  # tokens per block with a static N
ROWS_GENERIC = 2  # with N unrolled to MAX_N: 2 * 33 partials per thread


def factory(arch: str, dtype: str, N: int | None = None):
    """TileLang prim_func ``(residual[M, R, H], mhc_fn[N, R, H], out[M, N], mhc_norm_eps)``
    (``mhc_fn`` is TileKernels' ``[N, R * H]`` viewed by stream); ``N`` fixed when given.
    ``arch`` does not change the code."""
    T, M, R, H, N, nmax, rows, token_block = variant("mhc_pre_norm_fn", dtype, N)

    @T.macro
    def mix(t, n, d, rms, out):
        out[t, n] = d * rms

    @T.prim_func
    def mhc_pre_norm_fn(
        residual: T.Tensor((M, R, H), "bfloat16"),
        mhc_fn: T.Tensor((N, R, H), "float32"),
        out: T.Tensor((M, N), "float32"),
        mhc_norm_eps: T.float32,
    ):
        with T.Kernel(ceildiv(T, M, rows), threads=THREADS) as bt:
            token_block(residual, mhc_fn, bt, mhc_norm_eps, mix, None, out)

    return mhc_pre_norm_fn


def variant(op: str, dtype: str, N: int | None):
    """What a kernel of `op` (this one or its backward) builds on: ``(T, M, R, H, N, nmax,
    rows, token_block)``, the dynamic sizes (N static when given), the mixes the loops unroll
    to (``< N`` guards fold when static), tokens per block and the `sums_macro`."""
    if dtype != "bfloat16":
        raise ValueError(f"{op}: unsupported dtype {dtype!r}")
    error = spec_error_of(op)({"dtype": dtype}, {} if N is None else {"N": N})
    if error:
        raise ValueError(error)
    import tilelang.language as T

    M, R, H = T.dynamic("M"), T.dynamic("R"), T.dynamic("H")
    nmax = MAX_N if N is None else N
    rows = ROWS_GENERIC if N is None else ROWS_STATIC
    N = T.dynamic("N") if N is None else N
    return T, M, R, H, N, nmax, rows, sums_macro(T, M, R, H, N, nmax, rows)


def x_value(T, residual, ok, t, r, h):
    """``residual[t, r, h]`` as float32 where `ok`, else 0 (a guarded load)."""
    return T.cast(T.if_then_else(ok, residual[t, r, h], T.bfloat16(0)), "float32")


def sums_macro(T, M, R, H, N, nmax: int, rows: int):
    """The T.macro ``(residual, mhc_fn, bt, mhc_norm_eps, mix, row, *bufs)`` of block `bt` (128
    threads, tokens ``t0 = bt * rows ..``): ``tot[b * nmax + n] = x . mhc_fn[n]`` and
    ``tot[rows * nmax + b] = sum x**2`` in shared memory (rows past M and mixes past N are
    zeros), then ``mix(t, n, d, rsqrt(s / K + eps), *bufs)`` for each token and mix (one
    thread each) and, where given, ``row(tot, t0, tx, mhc_norm_eps, *bufs)`` on every thread
    (the macro's parameter names become the kernel's: ``mhc_norm_eps`` is the schema's)."""
    sums = rows * (nmax + 1)  # rows x nmax dot products, then the rows' sums of squares
    assert sums <= THREADS  # one thread per value in the final pass

    @T.macro
    def dot(part, xb, fv, n):
        for b in T.unroll(rows):
            for e in T.unroll(VEC):
                part[b * nmax + n] = part[b * nmax + n] + xb[b, e] * fv[e]

    @T.macro
    def token_sums(residual, mhc_fn, tot, t0, tx):
        xb = T.alloc_local((rows, VEC), "float32")
        fv = T.alloc_local((VEC,), "float32")
        part = T.alloc_local((sums,), "float32")
        red = T.alloc_shared((WARPS, sums), "float32")
        for j in T.unroll(sums):
            part[j] = T.float32(0)
        for r in T.serial(R):
            for c in T.serial(T.ceildiv(H, COLS)):
                col = c * COLS + tx * VEC
                if H % VEC == 0:
                    T.assume(H % VEC == 0)  # rows start 16-byte aligned: vector loads
                    for b in T.unroll(rows):
                        for e in T.vectorized(VEC):
                            ok = (t0 + b < M) & (col < H)
                            xb[b, e] = x_value(T, residual, ok, t0 + b, r, col + e)
                else:
                    for b in T.unroll(rows):
                        for e in T.unroll(VEC):
                            ok = (t0 + b < M) & (col + e < H)
                            xb[b, e] = x_value(T, residual, ok, t0 + b, r, col + e)
                for b in T.unroll(rows):
                    for e in T.unroll(VEC):
                        j = rows * nmax + b
                        part[j] = part[j] + xb[b, e] * xb[b, e]
                if H % VEC == 0:
                    T.assume(H % VEC == 0)
                    if col < H:  # past H the x values are zeros: nothing to add
                        for n in T.unroll(nmax):
                            if n < N:
                                # Two 16-byte halves: one 32-byte access fails on sm_100a.
                                for h in T.unroll(2):
                                    for e in T.vectorized(VEC // 2):
                                        fv[h * 4 + e] = mhc_fn[n, r, col + h * 4 + e]
                                dot(part, xb, fv, n)
                else:
                    for n in T.unroll(nmax):
                        if n < N:
                            for e in T.unroll(VEC):
                                fv[e] = T.if_then_else(
                                    col + e < H, mhc_fn[n, r, col + e], T.float32(0)
                                )
                            dot(part, xb, fv, n)
        # Block sums: a butterfly per value, then the warps' sums through shared memory.
        for j in T.unroll(sums):
            for s in T.unroll(5):
                part[j] = part[j] + T.shfl_xor(part[j], T.shift_left(1, 4 - s))
        if tx % 32 == 0:
            for j in T.unroll(sums):
                red[tx // 32, j] = part[j]
        T.sync_threads()
        if tx < sums:
            tot[tx] = red[0, tx] + red[1, tx] + red[2, tx] + red[3, tx]
        T.sync_threads()

    @T.macro
    def token_block(residual, mhc_fn, bt, mhc_norm_eps, mix, row, *bufs):
        tx = T.get_thread_binding()
        t0 = bt * rows
        tot = T.alloc_shared((sums,), "float32")
        token_sums(residual, mhc_fn, tot, t0, tx)
        if tx < rows * nmax:
            b = tx // nmax
            n = tx % nmax
            if (n < N) & (t0 + b < M):
                ms = tot[rows * nmax + b] / T.cast(R * H, "float32")
                mix(t0 + b, n, tot[tx], T.rsqrt(ms + mhc_norm_eps), *bufs)
        if row is not None:
            row(tot, t0, tx, mhc_norm_eps, *bufs)

    return token_block


def reference(residual, mhc_fn, mhc_norm_eps):
    """torch reference: ``out[t, n] = (x . mhc_fn[n]) * rsqrt(mean(x**2) + eps)`` with ``x =
    residual[t]`` and ``mhc_fn[n]`` flattened (``[N, R, H]`` or ``[N, R * H]``), float32 math."""
    x = residual.flatten(-2).float()
    mixes = x @ mhc_fn.reshape(mhc_fn.shape[0], -1).float().t()
    ms = x.square().sum(-1, keepdim=True) / x.shape[-1]
    return mixes * (ms + mhc_norm_eps).rsqrt()


def spec_error_of(op: str):
    """`op`'s ``spec_error``: why a static N cannot be built (the kernels unroll to MAX_N
    mixes), or None."""

    def spec_error(key, spec) -> str | None:
        n = spec.get("N")
        if n is not None and not 1 <= n <= MAX_N:
            return f"{op}: N = {n} is out of range; use 1 <= N <= {MAX_N}"
        return None

    return spec_error


SPEC = KernelSpec(
    op="mhc_pre_norm_fn",
    factory=factory,
    keys=({"dtype": "bfloat16"},),
    specs=({}, *({"N": n} for n in STATIC_N)),
    reference=reference,
    spec_error=spec_error_of("mhc_pre_norm_fn"),
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="warp shuffles and shared memory, no block all-reduce, PDL or arch choice",
    doc="mHC pre-norm mixes: (x . fn[n]) * rsqrt(mean(x^2) + eps) per token; bf16 x, fp32 out.",
)
