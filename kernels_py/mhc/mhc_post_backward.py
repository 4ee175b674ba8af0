"""mHC post-mix, backward: the four gradients of mhc_post (see mhc_post.py).

For ``out[n, :] = post[n] * x + sum_m comb[m, n] * residual[m, :]`` per token (TileKernels'
backward kernel, ``tile_kernels/mhc/post_kernel.py``, computes the same; its kernel serves
R = 4 only)::

    grad_x[h]           = bf16(sum_n post[n] * grad_out[n, h])
    grad_residual[m, h] = bf16(sum_n comb[m, n] * grad_out[n, h])
    grad_post[n]        = sum_h x[h] * grad_out[n, h]                 (float32)
    grad_comb[m, n]     = sum_h residual[m, h] * grad_out[n, h]       (float32)

sums over n in order from 0, in float32. One block of 128 threads per token walks the row in
chunks of 1024 columns (8 per thread, element loads; 16-byte stores of ``grad_residual`` when
``H % 8 == 0``): the thread keeps its chunk of the R rows of ``grad_out`` and ``R + R * R`` float32
partial dot products in registers (loops unrolled to ``MAX_R = 8`` and guarded by ``< R``, so
any R <= 8 runs one variant), and at the end a warp butterfly per value plus one pass through
shared memory reduces them.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..spec import ALL_CUDA_SAME, KernelSpec
from .expand_to_mhc import COLS, THREADS, VEC

MAX_R = 8
WARPS = THREADS // 32
SUMS = MAX_R + MAX_R * MAX_R  # grad_post, then grad_comb row by row


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(grad_out[M, R, H], x[M, H], residual[M, R, H],
    post_layer_mix[M, R, 1], comb_res_mix[M, R, R], grad_x[M, H], grad_residual[M, R, H],
    grad_post_layer_mix[M, R, 1], grad_comb_res_mix[M, R, R])``. ``arch`` does not change the
    code."""
    if dtype != "bfloat16":
        raise ValueError(f"mhc_post_backward: unsupported dtype {dtype!r}")
    import tilelang.language as T

    M, R, H = T.dynamic("M"), T.dynamic("R"), T.dynamic("H")

    def ok(col, e):
        """Element e of the thread's chunk exists (H % 8 == 0: the vector's last decides)."""
        return T.if_then_else(H % VEC == 0, col + VEC - 1 < H, col + e < H)

    @T.prim_func
    def mhc_post_backward(
        grad_out: T.Tensor((M, R, H), "bfloat16"),
        x: T.Tensor((M, H), "bfloat16"),
        residual: T.Tensor((M, R, H), "bfloat16"),
        post_layer_mix: T.Tensor((M, R, 1), "float32"),
        comb_res_mix: T.Tensor((M, R, R), "float32"),
        grad_x: T.Tensor((M, H), "bfloat16"),
        grad_residual: T.Tensor((M, R, H), "bfloat16"),
        grad_post_layer_mix: T.Tensor((M, R, 1), "float32"),
        grad_comb_res_mix: T.Tensor((M, R, R), "float32"),
    ):
        with T.Kernel(M, threads=THREADS) as t:
            tx = T.get_thread_binding()
            go = T.alloc_local((MAX_R, VEC), "float32")
            v = T.alloc_local((VEC,), "float32")  # a row of x or residual
            acc = T.alloc_local((VEC,), "float32")
            o = T.alloc_local((VEC,), "bfloat16")
            o_bits = T.view(o, (4,), "uint32")
            part = T.alloc_local((SUMS,), "float32")
            red = T.alloc_shared((WARPS, SUMS), "float32")
            for k in T.unroll(SUMS):
                part[k] = T.float32(0)
            vector = H % VEC == 0
            for c in T.serial(T.ceildiv(H, COLS)):
                col = c * COLS + tx * VEC
                for n in T.unroll(MAX_R):
                    for e in T.unroll(VEC):
                        go[n, e] = T.if_then_else(
                            (n < R) & ok(col, e), T.cast(grad_out[t, n, col + e], "float32"), 0.0
                        )
                # grad_x and grad_post
                for e in T.unroll(VEC):
                    v[e] = T.if_then_else(ok(col, e), T.cast(x[t, col + e], "float32"), 0.0)
                    acc[e] = T.float32(0)
                for n in T.unroll(MAX_R):
                    if n < R:
                        for e in T.unroll(VEC):
                            acc[e] = acc[e] + post_layer_mix[t, n, 0] * go[n, e]
                            part[n] = part[n] + v[e] * go[n, e]
                for e in T.unroll(VEC):
                    if ok(col, e):
                        grad_x[t, col + e] = T.cast(acc[e], "bfloat16")
                # grad_residual and grad_comb, one residual row at a time
                for m in T.unroll(MAX_R):
                    if m < R:
                        for e in T.unroll(VEC):
                            v[e] = T.if_then_else(
                                ok(col, e), T.cast(residual[t, m, col + e], "float32"), 0.0
                            )
                            acc[e] = T.float32(0)
                        for n in T.unroll(MAX_R):
                            if n < R:
                                for e in T.unroll(VEC):
                                    acc[e] = acc[e] + comb_res_mix[t, m, n] * go[n, e]
                                    part[MAX_R + m * MAX_R + n] = (
                                        part[MAX_R + m * MAX_R + n] + v[e] * go[n, e]
                                    )
                        if vector:
                            if col < H:
                                for e in T.unroll(VEC):
                                    o[e] = T.cast(acc[e], "bfloat16")
                                T.stg128(grad_residual[t, m, col], o_bits.vload([0], "uint32x4"))
                        else:
                            for e in T.unroll(VEC):
                                if col + e < H:
                                    grad_residual[t, m, col + e] = T.cast(acc[e], "bfloat16")
            # Block sums: a butterfly per value, then the warps' sums through shared memory.
            for k in T.unroll(SUMS):
                for s in T.unroll(5):
                    part[k] = part[k] + T.shfl_xor(part[k], T.shift_left(1, 4 - s))
            if tx % 32 == 0:
                for k in T.unroll(SUMS):
                    red[tx // 32, k] = part[k]
            T.sync_threads()
            if tx < MAX_R:
                if tx < R:
                    total = red[0, tx] + red[1, tx] + red[2, tx] + red[3, tx]
                    grad_post_layer_mix[t, tx, 0] = total
            for i in T.serial(T.ceildiv(MAX_R * MAX_R, THREADS)):
                k = i * THREADS + tx
                if k < MAX_R * MAX_R:
                    m, n = k // MAX_R, k % MAX_R
                    if (m < R) & (n < R):
                        j = MAX_R + k
                        total = red[0, j] + red[1, j] + red[2, j] + red[3, j]
                        grad_comb_res_mix[t, m, n] = total

    return mhc_post_backward


def reference(grad_out, x, residual, post_layer_mix, comb_res_mix):
    """torch reference: (grad_x, grad_residual, grad_post_layer_mix, grad_comb_res_mix) as
    documented, float32 math (sums over n in order)."""
    import torch

    g = grad_out.float()
    r = grad_out.shape[-2]
    gx = torch.zeros_like(x, dtype=torch.float32)
    gres = torch.zeros_like(residual, dtype=torch.float32)
    for n in range(r):
        gx = gx + post_layer_mix[..., n, :].float() * g[..., n, :]
        gres = gres + comb_res_mix[..., :, n].float().unsqueeze(-1) * g[..., n, :].unsqueeze(-2)
    gpost = (x.float().unsqueeze(-2) * g).sum(-1, keepdim=True)
    gcomb = torch.einsum("...mh,...nh->...mn", residual.float(), g)
    return gx.to(torch.bfloat16), gres.to(torch.bfloat16), gpost, gcomb


SPEC = KernelSpec(
    op="mhc_post_backward",
    factory=factory,
    keys=({"dtype": "bfloat16"},),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="grads of mhc_post (x, residual bf16; post_layer_mix, comb_res_mix fp32); R <= 8.",
)
