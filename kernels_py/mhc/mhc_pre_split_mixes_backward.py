"""mHC pre-mix split, backward: the gradients of mhc_pre_split_mixes (see mhc_pre_split_mixes.py).

With ``z = x * scale[seg(j)] + base[j]`` recomputed as the forward rounds it and ``s =
sigmoid(z)``, the gradient of the loss with respect to z is, per column (the chain rule
through the reference, each product rounded in the order written)::

    gz[t, j] = g_pre[t, j] * (1 - s) * s                            j < R
    gz[t, j] = (g_post[t, j - R] * mhc_post_mult_value) * (1 - s) * s  R <= j < 2 R
    gz[t, j] = g_comb[t, (j - 2 R) / R, (j - 2 R) % R]               otherwise

    input_mixes_grad[t, j] = gz[t, j] * scale[seg(j)]
    mhc_base_grad[j]       = sum_t gz[t, j]
    mhc_scale_grad[k]      = sum over the columns j of segment k of sum_t gz[t, j] * x[t, j]

(TileKernels' backward kernel, ``tile_kernels/mhc/pre_split_mixes_kernel.py``, computes the
same, the post segment from the saved output; its sums are per-SM partials added by torch.)

Two kernels, no atomics (the sums' order is fixed: the result does not depend on timing).
The first has one block of 256 threads per ``TOKENS`` tokens: thread ``tx < G K`` (``G = 256 //
K`` rows at a time) owns column ``j = tx % K`` and walks rows ``tx // K, + G, ...`` of its
block's tokens (consecutive threads touch consecutive addresses: coalesced), writes
``input_mixes_grad`` and keeps two float32 column sums; the block adds its G partial sums per
column in row order (shared memory) into ``partial[b, j]`` and ``partial[b, K + j]``. The
second kernel (one block) adds the blocks' partials in block order per column and the
segments' columns in order. ``K <= 256`` (``R <= 15``). One generic variant; the head op's
backward (mhc_head_compute_mix_backward.py) reuses both kernels' pieces with one segment.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .mhc_pre_split_mixes import affine, scales, sigmoid

THREADS = 256
TOKENS = 256  # tokens per block of the first kernel
MAX_K = THREADS  # columns: each thread of the block reduction owns one


def sigmoid_grad(T, g, s):
    """``g * (1 - s) * s`` rounded left to right (torch's sigmoid backward)."""
    return T.ieee_mul(T.ieee_mul(g, T.float32(1) - s), s)


def column_sums_macro(T, M, K):
    """Macro ``(column, bufs, partial, red, b)`` of the first kernel: ``column(t, j, acc,
    *bufs)`` handles element (t, j) and adds its two terms to ``acc[0]`` (base) and ``acc[1]``
    (scale); the macro walks the block's rows and leaves the block's column sums in
    ``partial[b]``."""

    @T.macro
    def column_sums(column, bufs, partial, red, b):
        tx = T.get_thread_binding()
        g_rows = T.alloc_var("int32", init=T.truncdiv(THREADS, K))  # rows per pass
        g = T.alloc_var("int32", init=T.truncdiv(tx, K))
        j = T.alloc_var("int32", init=T.truncmod(tx, K))
        T.assume((0 <= j) & (j < K) & (1 <= g_rows) & (0 <= g))
        acc = T.alloc_local((2,), "float32")
        acc[0] = T.float32(0)
        acc[1] = T.float32(0)
        if g < g_rows:
            for p in T.serial(T.ceildiv(TOKENS, g_rows)):
                t = T.alloc_var("int32", init=b * TOKENS + p * g_rows + g)
                if (t < M) & (p * g_rows + g < TOKENS):
                    T.assume((0 <= t) & (t < M))
                    column(t, j, acc, *bufs)
        red[0, tx] = acc[0]
        red[1, tx] = acc[1]
        T.sync_threads()
        if tx < K:
            for h in T.unroll(2):
                acc[h] = red[h, tx]
                for r in T.serial(1, g_rows):
                    acc[h] = acc[h] + red[h, r * K + tx]
                partial[b, h * K + tx] = acc[h]

    return column_sums


def finish_macro(T, K, P):
    """Macro ``(partial, base_grad, scale_grad, cols, seg_of, segs)`` of the second kernel (one
    block): ``base_grad[j]`` = the blocks' base sums in block order; ``scale_grad[k]`` = the
    scale sums of the columns ``j`` with ``seg_of(j) == k`` (``k < segs``), in column order."""

    @T.macro
    def finish(partial, base_grad, scale_grad, cols, seg_of, segs):
        tx = T.get_thread_binding()
        acc = T.alloc_local((2,), "float32")
        if tx < K:
            for h in T.unroll(2):
                acc[h] = partial[0, h * K + tx]
                for q in T.serial(1, P):
                    acc[h] = acc[h] + partial[q, h * K + tx]
            base_grad[tx] = acc[0]
            cols[tx] = acc[1]
        T.sync_threads()
        if tx < segs:
            acc[1] = T.float32(0)
            for c in T.serial(K):
                if seg_of(c) == tx:
                    acc[1] = acc[1] + cols[c]
            scale_grad[tx] = acc[1]

    return finish


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(pre_layer_mix_grad[M, R, 1], post_layer_mix_grad[M, R, 1],
    comb_res_mix_grad[M, R, R], input_mixes[M, K], mhc_scale[3], mhc_base[K],
    input_mixes_grad[M, K], mhc_scale_grad[3], mhc_base_grad[K], partial[P, 2 K],
    mhc_post_mult_value)``, ``P = ceil(M / TOKENS)``. ``arch`` does not change the code."""
    if dtype != "float32":
        raise ValueError(f"mhc_pre_split_mixes_backward: unsupported dtype {dtype!r}")
    import tilelang.language as T

    M, K, R = T.dynamic("M"), T.dynamic("K"), T.dynamic("R")
    P = (M + TOKENS - 1) // TOKENS
    column_sums = column_sums_macro(T, M, K)
    finish = finish_macro(T, K, P)

    def seg_of(j):
        return T.if_then_else(j < R, 0, T.if_then_else(j < 2 * R, 1, 2))

    @T.macro
    def column(
        t,
        j,
        acc,
        pre_layer_mix_grad,
        post_layer_mix_grad,
        comb_res_mix_grad,
        input_mixes,
        mhc_scale,
        mhc_base,
        input_mixes_grad,
        mhc_post_mult_value,
    ):
        x = input_mixes[t, j]
        gz = T.alloc_var("float32")
        k = T.alloc_var("int32", init=seg_of(j))
        T.assume((0 <= k) & (k < 3))
        scale = mhc_scale[k]
        if j < 2 * R:
            s = sigmoid(T, affine(T, x, scale, mhc_base[j]))
            if j < R:
                gz = sigmoid_grad(T, pre_layer_mix_grad[t, j, 0], s)
            else:
                g = T.ieee_mul(post_layer_mix_grad[t, j - R, 0], mhc_post_mult_value)
                gz = sigmoid_grad(T, g, s)
        else:
            m = T.alloc_var("int32", init=T.truncdiv(j, R) - 2)
            n = T.alloc_var("int32", init=T.truncmod(j, R))
            T.assume((0 <= m) & (m < R) & (0 <= n) & (n < R))
            gz = comb_res_mix_grad[t, m, n]
        input_mixes_grad[t, j] = gz * scale
        acc[0] = acc[0] + gz
        acc[1] = acc[1] + gz * x

    @T.prim_func
    def mhc_pre_split_mixes_backward(
        pre_layer_mix_grad: T.Tensor((M, R, 1), "float32"),
        post_layer_mix_grad: T.Tensor((M, R, 1), "float32"),
        comb_res_mix_grad: T.Tensor((M, R, R), "float32"),
        input_mixes: T.Tensor((M, K), "float32"),
        mhc_scale: T.Tensor((3,), "float32"),
        mhc_base: T.Tensor((K,), "float32"),
        input_mixes_grad: T.Tensor((M, K), "float32"),
        mhc_scale_grad: T.Tensor((3,), "float32"),
        mhc_base_grad: T.Tensor((K,), "float32"),
        partial: T.Tensor((P, 2 * K), "float32"),
        mhc_post_mult_value: T.float32,
    ):
        with T.Kernel(ceildiv(T, M, TOKENS), threads=THREADS) as b:
            red = T.alloc_shared((2, THREADS), "float32")
            bufs = (
                pre_layer_mix_grad,
                post_layer_mix_grad,
                comb_res_mix_grad,
                input_mixes,
                mhc_scale,
                mhc_base,
                input_mixes_grad,
                mhc_post_mult_value,
            )
            column_sums(column, bufs, partial, red, b)
        with T.Kernel(1, threads=THREADS) as _:
            cols = T.alloc_shared((THREADS,), "float32")
            finish(partial, mhc_base_grad, mhc_scale_grad, cols, seg_of, 3)

    return mhc_pre_split_mixes_backward


def reference(
    pre_layer_mix_grad,
    post_layer_mix_grad,
    comb_res_mix_grad,
    input_mixes,
    mhc_scale,
    mhc_base,
    mhc_post_mult_value,
):
    """torch reference, float32: ``(input_mixes_grad, mhc_scale_grad, mhc_base_grad)`` by the
    documented formulas (the token sums in torch's order; zeros for no tokens)."""
    import torch

    r = pre_layer_mix_grad.shape[-2]
    col_scale = scales(mhc_scale, r)
    s = (input_mixes * col_scale + mhc_base).sigmoid()
    s_pre, s_post = s[..., :r], s[..., r : 2 * r]
    g_pre = pre_layer_mix_grad[..., 0] * (1 - s_pre) * s_pre
    g_post = (post_layer_mix_grad[..., 0] * mhc_post_mult_value) * (1 - s_post) * s_post
    g_comb = comb_res_mix_grad.reshape(*comb_res_mix_grad.shape[:-2], r * r)
    gz = torch.cat((g_pre, g_post, g_comb), dim=-1)
    k = gz.shape[-1]
    by_col = (gz * input_mixes).reshape(-1, k).sum(0)
    segments = (by_col[:r].sum(), by_col[r : 2 * r].sum(), by_col[2 * r :].sum())
    return gz * col_scale, torch.stack(segments), gz.reshape(-1, k).sum(0)


SPEC = KernelSpec(
    op="mhc_pre_split_mixes_backward",
    factory=factory,
    keys=({"dtype": "float32"},),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="block sums through shared memory with __syncthreads only (no AllReduce, "
    "PDL or arch choice): one source on every arch (verify-lowering-classes)",
    doc="grads of mhc_pre_split_mixes: input_mixes_grad, and mhc_scale_grad / mhc_base_grad "
    "summed over tokens in a fixed order.",
)
