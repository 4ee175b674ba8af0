"""mHC pre-mix, backward: ``grad_x`` and ``grad_mix`` from ``grad_out`` (see mhc_pre_apply_mix.py).

For ``out[t, :] = sum_r mix[t, r] * x[t, r, :]`` (TileKernels' backward kernel,
``tile_kernels/mhc/pre_apply_mix_kernel.py``, computes the same)::

    grad_x[t, r, h]   = bf16(mix[t, r] * grad_out[t, h])          (float32 product, rounded)
    grad_mix[t, r, 0] = sum_h grad_out[t, h] * x[t, r, h]         (float32)

One block of 128 threads per token. For each ``r``, the threads walk the row in chunks of
1024 columns (8 per thread: one 16-byte load of ``grad_out`` and of ``x``, one 16-byte store of
``grad_x``, when ``H % 8 == 0``; element accesses otherwise), each keeping a float32 partial
dot product; a warp butterfly and a 4-entry shared-memory sum give ``grad_mix[t, r]``. The
``grad_out`` row is re-read per ``r`` (from L1/L2). One generic variant (R, H runtime),
written per thread.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..spec import ALL_CUDA_SAME, KernelSpec
from .expand_to_mhc import COLS, THREADS, VEC

WARPS = THREADS // 32


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(grad_out[M, H], x[M, R, H], mix[M, R, 1], grad_x[M, R, H],
    grad_mix[M, R, 1])``. ``arch`` does not change the code."""
    if dtype != "bfloat16":
        raise ValueError(f"mhc_pre_apply_mix_backward: unsupported dtype {dtype!r}")
    import tilelang.language as T

    M, R, H = T.dynamic("M"), T.dynamic("R"), T.dynamic("H")
    block_sum = block_sum_macro(T)

    @T.prim_func
    def mhc_pre_apply_mix_backward(
        grad_out: T.Tensor((M, H), "bfloat16"),
        x: T.Tensor((M, R, H), "bfloat16"),
        mix: T.Tensor((M, R, 1), "float32"),
        grad_x: T.Tensor((M, R, H), "bfloat16"),
        grad_mix: T.Tensor((M, R, 1), "float32"),
    ):
        with T.Kernel(M, threads=THREADS) as t:
            tx = T.get_thread_binding()
            go = T.alloc_local((VEC,), "bfloat16")
            xv = T.alloc_local((VEC,), "bfloat16")
            gx = T.alloc_local((VEC,), "bfloat16")
            gx_bits = T.view(gx, (4,), "uint32")
            dot = T.alloc_local((1,), "float32")
            red = T.alloc_shared((WARPS,), "float32")
            for m in T.serial(R):
                w = mix[t, m, 0]
                dot[0] = T.float32(0)
                if H % VEC == 0:
                    T.assume(H % VEC == 0)  # rows start 16-byte aligned: vector accesses
                    for c in T.serial(T.ceildiv(H, COLS)):
                        col = c * COLS + tx * VEC
                        if col < H:  # H % VEC == 0: the whole vector exists
                            for e in T.vectorized(VEC):
                                go[e] = grad_out[t, col + e]
                            for e in T.vectorized(VEC):
                                xv[e] = x[t, m, col + e]
                            for e in T.unroll(VEC):
                                gx[e] = T.cast(w * T.cast(go[e], "float32"), "bfloat16")
                                dot[0] = dot[0] + T.cast(go[e], "float32") * T.cast(
                                    xv[e], "float32"
                                )
                            T.stg128(grad_x[t, m, col], gx_bits.vload([0], "uint32x4"))
                else:
                    for c in T.serial(T.ceildiv(H, COLS)):
                        for e in T.unroll(VEC):
                            col = c * COLS + tx * VEC + e
                            if col < H:
                                g = T.cast(grad_out[t, col], "float32")
                                grad_x[t, m, col] = T.cast(w * g, "bfloat16")
                                dot[0] = dot[0] + g * T.cast(x[t, m, col], "float32")
                block_sum(dot, red, tx)
                if tx == 0:
                    grad_mix[t, m, 0] = dot[0]

    return mhc_pre_apply_mix_backward


def block_sum_macro(T):
    """Macro ``(v[1], red[WARPS] shared, tx)``: thread 0's ``v[0]`` becomes the sum of every
    thread's (a warp butterfly, then the warps' sums through shared memory; the trailing
    barrier lets the caller reuse ``red``)."""

    @T.macro
    def block_sum(v, red, tx):
        for s in T.unroll(5):
            v[0] = v[0] + T.shfl_xor(v[0], T.shift_left(1, 4 - s))
        if tx % 32 == 0:
            red[tx // 32] = v[0]
        T.sync_threads()
        if tx == 0:
            v[0] = red[0]
            for k in T.unroll(1, WARPS):
                v[0] = v[0] + red[k]
        T.sync_threads()

    return block_sum


def reference(grad_out, x, mix):
    """torch reference: (grad_x bf16, grad_mix float32) as documented, float32 math."""
    import torch

    g = grad_out.float().unsqueeze(-2)
    grad_x = (mix.float() * g).to(torch.bfloat16)
    grad_mix = (g * x.float()).sum(-1, keepdim=True)
    return grad_x, grad_mix


SPEC = KernelSpec(
    op="mhc_pre_apply_mix_backward",
    factory=factory,
    keys=({"dtype": "bfloat16"},),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="grads of mhc_pre_apply_mix: grad_x = bf16(mix * grad_out), grad_mix = sum_h grad_out * x.",
)
