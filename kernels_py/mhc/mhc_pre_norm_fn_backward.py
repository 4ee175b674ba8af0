"""mHC pre-norm projection, backward: the gradients of mhc_pre_norm_fn (see mhc_pre_norm_fn.py).

Per token, with ``x = residual[t]`` flattened to ``K = R * H`` values, ``d[n] = x . mhc_fn[n]``,
``s = sum_k x[k]**2``, ``r = rsqrt(s / K + eps)`` (the forward's ``out[t, n] = d[n] * r``) and
``g = out_grad[t]``::

    gd[n] = g[n] * r                                      (the gradient of d[n])
    gs    = -(sum_n g[n] * d[n]) * r / (s + eps * K) / 2  (the gradient of s)
    residual_grad[t, k] = bf16(sum_n gd[n] * mhc_fn[n, k] + 2 * x[k] * gs)
    mhc_fn_grad[n, k]   = sum_t gd[n] * x[k]

(TileKernels' backward, ``tile_kernels/modeling/mhc/ops/norm_fn.py`` of `tile-kernels` 1.0.0,
computes the same from the forward's saved ``d`` and ``s``; it rounds ``gd`` and ``mhc_fn`` to
TF32 for its tensor-core products, we keep float32.) Three kernels, every sum in a fixed order
(no atomics):

1. per block of ``ROWS`` tokens, ``d`` and ``s`` as the forward computes them
   (mhc_pre_norm_fn.sums_macro), then ``gd`` and ``gs`` into the scratch ``stats[M, N + 1]``;
2. per block of ``THREADS * VB`` columns of one stream and ``CHUNK`` tokens: ``residual_grad``
   of those tokens and columns, and the chunk's ``mhc_fn_grad`` partial sums (tokens in order)
   into the scratch ``partial[P, N, R, H]``, ``P = ceil(M / CHUNK)``. Each thread holds its
   columns of ``mhc_fn`` and of the sums in registers and walks the tokens ``STAGE`` at a
   time: their x loaded first (all in flight at once), their gd, gs staged in shared memory
   (no spills at sm_90a, NVRTC 12.9: 190 registers at N = 24, 236 generic);
3. ``mhc_fn_grad[n, r, h] = sum_p partial[p, n, r, h]``, p in order.

Variants as the forward's: N = 24 unrolled exactly, and a generic N <= 32.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .expand_to_mhc import THREADS
from .mhc_pre_norm_fn import STATIC_N, spec_error_of, variant, x_value

CHUNK = 1024  # tokens per block of the second kernel (and per partial sum of mhc_fn_grad)
STAGE = 16  # tokens the second kernel stages at a time: gd, gs in shared memory, x in registers
VB = 2  # columns per thread in the second kernel


def factory(arch: str, dtype: str, N: int | None = None):
    """TileLang prim_func ``(out_grad[M, N], residual[M, R, H], mhc_fn[N, R, H],
    residual_grad[M, R, H], mhc_fn_grad[N, R, H], stats[M, N + 1], partial[P, N, R, H],
    mhc_norm_eps)``, ``P = ceil(M / CHUNK)``; ``N`` fixed when given. ``arch`` does not change
    the code."""
    T, M, R, H, N, nmax, rows, token_block = variant("mhc_pre_norm_fn_backward", dtype, N)
    P = (M + CHUNK - 1) // CHUNK
    width = nmax + 1  # a staged token: gd[0 .. nmax - 1] (zeros past N), then gs
    loads = (STAGE * width + THREADS - 1) // THREADS

    @T.macro
    def mix(t, n, d, rms, out_grad, stats):
        stats[t, n] = out_grad[t, n] * rms  # gd

    @T.macro
    def row(tot, t0, tx, mhc_norm_eps, out_grad, stats):
        if tx < rows:
            if t0 + tx < M:
                k = T.cast(R * H, "float32")
                dg = T.alloc_local((1,), "float32")  # sum_n g[n] * d[n], n in order
                dg[0] = T.float32(0)
                for j in T.serial(N):
                    dg[0] = dg[0] + out_grad[t0 + tx, j] * tot[tx * nmax + j]
                s = tot[rows * nmax + tx]
                rms = T.rsqrt(s / k + mhc_norm_eps)
                stats[t0 + tx, N] = dg[0] * rms / (s + mhc_norm_eps * k) / T.float32(-2)  # gs

    @T.prim_func
    def mhc_pre_norm_fn_backward(
        out_grad: T.Tensor((M, N), "float32"),
        residual: T.Tensor((M, R, H), "bfloat16"),
        mhc_fn: T.Tensor((N, R, H), "float32"),
        residual_grad: T.Tensor((M, R, H), "bfloat16"),
        mhc_fn_grad: T.Tensor((N, R, H), "float32"),
        stats: T.Tensor((M, N + 1), "float32"),
        partial: T.Tensor((P, N, R, H), "float32"),
        mhc_norm_eps: T.float32,
    ):
        # 1. gd and gs per token.
        with T.Kernel(ceildiv(T, M, rows), threads=THREADS) as bt:
            token_block(residual, mhc_fn, bt, mhc_norm_eps, mix, row, out_grad, stats)
        # 2. residual_grad, and mhc_fn_grad's partial sums of CHUNK tokens.
        # One grid dimension (x): P, R and the column blocks may each pass 65535.
        with T.Kernel(
            ceildiv(T, M, CHUNK) * R * ceildiv(T, H, THREADS * VB), threads=THREADS
        ) as b2:
            tx2 = T.get_thread_binding()
            hb, rb, p = split_index(T, b2, ceildiv(T, H, THREADS * VB), R)
            h0 = hb * (THREADS * VB) + tx2 * VB
            fr = T.alloc_local((nmax, VB), "float32")
            acc = T.alloc_local((nmax, VB), "float32")
            xs = T.alloc_local((STAGE, VB), "float32")  # the stage's x: its loads in flight
            gv = T.alloc_local((VB,), "float32")
            st = T.alloc_shared((STAGE, width), "float32")
            for n in T.unroll(nmax):
                for e in T.unroll(VB):
                    acc[n, e] = T.float32(0)
                    fr[n, e] = T.if_then_else(
                        (n < N) & (h0 + e < H), mhc_fn[n, rb, h0 + e], T.float32(0)
                    )
            for sc in T.serial(CHUNK // STAGE):
                s0 = p * CHUNK + sc * STAGE
                if s0 < M:
                    for ti in T.unroll(STAGE):
                        for e in T.unroll(VB):
                            ok = (s0 + ti < M) & (h0 + e < H)
                            xs[ti, e] = x_value(T, residual, ok, s0 + ti, rb, h0 + e)
                    T.sync_threads()  # the previous stage is read
                    for i in T.unroll(loads):
                        j = i * THREADS + tx2
                        ti = j // width
                        n = j % width
                        if j < STAGE * width:
                            st[ti, n] = T.if_then_else(
                                s0 + ti < M,
                                T.if_then_else(
                                    n == nmax,
                                    stats[s0 + ti, N],
                                    T.if_then_else(n < N, stats[s0 + ti, n], T.float32(0)),
                                ),
                                T.float32(0),
                            )
                    T.sync_threads()
                    for ti in T.unroll(STAGE):  # unrolled: xs stays in registers
                        t = s0 + ti
                        if t < M:
                            for e in T.unroll(VB):
                                gv[e] = T.float32(0)
                            for n in T.unroll(nmax):
                                for e in T.unroll(VB):
                                    gv[e] = gv[e] + st[ti, n] * fr[n, e]
                                    acc[n, e] = acc[n, e] + st[ti, n] * xs[ti, e]
                            for e in T.unroll(VB):
                                if h0 + e < H:
                                    residual_grad[t, rb, h0 + e] = T.cast(
                                        gv[e] + T.float32(2) * xs[ti, e] * st[ti, nmax],
                                        "bfloat16",
                                    )
            for n in T.unroll(nmax):
                for e in T.unroll(VB):
                    if (n < N) & (h0 + e < H):
                        partial[p, n, rb, h0 + e] = acc[n, e]
        # 3. mhc_fn_grad: the chunks' partial sums in order.
        with T.Kernel(N * R * ceildiv(T, H, THREADS), threads=THREADS) as b3:
            tx3 = T.get_thread_binding()
            hb3, rb3, nb3 = split_index(T, b3, ceildiv(T, H, THREADS), R)
            h = hb3 * THREADS + tx3
            if h < H:
                total = T.alloc_local((1,), "float32")
                total[0] = T.float32(0)
                for q in T.serial(P):
                    total[0] = total[0] + partial[q, nb3, rb3, h]
                mhc_fn_grad[nb3, rb3, h] = total[0]

    return mhc_pre_norm_fn_backward


def split_index(T, b, inner, middle):
    """Block index ``b = (outer * middle + m) * inner + i`` as ``(i, m, outer)``, in unsigned
    arithmetic (C's division: the indices are >= 0)."""
    rest = T.truncdiv(b, inner)
    return T.truncmod(b, inner), T.truncmod(rest, middle), T.truncdiv(rest, middle)


def reference(out_grad, residual, mhc_fn, mhc_norm_eps):
    """torch reference, float32: ``(residual_grad, mhc_fn_grad)`` by the documented formulas
    (``mhc_fn`` as ``[N, R, H]`` or ``[N, R * H]``, ``mhc_fn_grad`` in its shape; zeros for no
    tokens)."""
    x = residual.flatten(-2).float()
    lead = x.shape[:-1]
    x = x.reshape(-1, x.shape[-1])
    g = out_grad.reshape(-1, out_grad.shape[-1]).float()
    fn = mhc_fn.reshape(mhc_fn.shape[0], -1).float()
    k = x.shape[-1]
    d = x @ fn.t()
    s = x.square().sum(-1, keepdim=True)
    rms = (s / k + mhc_norm_eps).rsqrt()
    gd = g * rms
    gs = -(g * d).sum(-1, keepdim=True) * rms / (s + mhc_norm_eps * k) / 2
    x_grad = (gd @ fn + 2 * x * gs).to(residual.dtype)
    return x_grad.view(*lead, *residual.shape[-2:]), (gd.t() @ x).view(mhc_fn.shape)


SPEC = KernelSpec(
    op="mhc_pre_norm_fn_backward",
    factory=factory,
    keys=({"dtype": "bfloat16"},),
    specs=({}, *({"N": n} for n in STATIC_N)),
    reference=reference,
    spec_error=spec_error_of("mhc_pre_norm_fn_backward"),
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="the forward's warp shuffles and shared memory, per-thread loops and "
    "__syncthreads only (no AllReduce, PDL or arch choice)",
    doc="grads of mhc_pre_norm_fn: residual_grad (bf16) and mhc_fn_grad summed over tokens "
    "in a fixed order.",
)
