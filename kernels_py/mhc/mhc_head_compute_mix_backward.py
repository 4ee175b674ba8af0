"""mHC head mix, backward: the gradients of mhc_head_compute_mix (see mhc_head_compute_mix.py).

With ``s = sigmoid(input_mix * mhc_scale[0] + mhc_base)`` recomputed as the forward rounds it
and ``gz = output_mix_grad * (1 - s) * s`` (rounded left to right, torch's sigmoid
backward)::

    input_mix_grad[t, j] = gz[t, j] * mhc_scale[0]
    mhc_base_grad[j]     = sum_t gz[t, j]
    mhc_scale_grad[0]    = sum over j of sum_t gz[t, j] * input_mix[t, j]

(TileKernels' backward kernel, ``tile_kernels/mhc/head_compute_mix_kernel.py``, computes the
same with per-SM partials added by torch.) The two kernels of mhc_pre_split_mixes_backward
(kernels_py/mhc/mhc_pre_split_mixes_backward.py: per-block column sums in a fixed order, then
one block adding the blocks' sums) with one segment; ``R <= 256``. One generic variant.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .mhc_pre_split_mixes import affine, sigmoid
from .mhc_pre_split_mixes_backward import (
    THREADS,
    TOKENS,
    column_sums_macro,
    finish_macro,
    sigmoid_grad,
)


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(output_mix_grad[M, R], input_mix[M, R], mhc_scale[1],
    mhc_base[R], input_mix_grad[M, R], mhc_scale_grad[1], mhc_base_grad[R], partial[P, 2 R])``,
    ``P = ceil(M / TOKENS)``. ``arch`` does not change the code."""
    if dtype != "float32":
        raise ValueError(f"mhc_head_compute_mix_backward: unsupported dtype {dtype!r}")
    import tilelang.language as T

    M, R = T.dynamic("M"), T.dynamic("R")
    P = (M + TOKENS - 1) // TOKENS
    column_sums = column_sums_macro(T, M, R)
    finish = finish_macro(T, R, P)

    @T.macro
    def column(t, j, acc, output_mix_grad, input_mix, mhc_scale, mhc_base, input_mix_grad):
        x = input_mix[t, j]
        s = sigmoid(T, affine(T, x, mhc_scale[0], mhc_base[j]))
        gz = sigmoid_grad(T, output_mix_grad[t, j], s)
        input_mix_grad[t, j] = gz * mhc_scale[0]
        acc[0] = acc[0] + gz
        acc[1] = acc[1] + gz * x

    @T.prim_func
    def mhc_head_compute_mix_backward(
        output_mix_grad: T.Tensor((M, R), "float32"),
        input_mix: T.Tensor((M, R), "float32"),
        mhc_scale: T.Tensor((1,), "float32"),
        mhc_base: T.Tensor((R,), "float32"),
        input_mix_grad: T.Tensor((M, R), "float32"),
        mhc_scale_grad: T.Tensor((1,), "float32"),
        mhc_base_grad: T.Tensor((R,), "float32"),
        partial: T.Tensor((P, 2 * R), "float32"),
    ):
        with T.Kernel(ceildiv(T, M, TOKENS), threads=THREADS) as b:
            red = T.alloc_shared((2, THREADS), "float32")
            bufs = (output_mix_grad, input_mix, mhc_scale, mhc_base, input_mix_grad)
            column_sums(column, bufs, partial, red, b)
        with T.Kernel(1, threads=THREADS) as _:
            cols = T.alloc_shared((THREADS,), "float32")
            finish(partial, mhc_base_grad, mhc_scale_grad, cols, lambda j: 0, 1)

    return mhc_head_compute_mix_backward


def reference(output_mix_grad, input_mix, mhc_scale, mhc_base):
    """torch reference, float32: ``(input_mix_grad, mhc_scale_grad, mhc_base_grad)`` by the
    documented formulas (the token sums in torch's order; zeros for no tokens)."""
    s = (input_mix * mhc_scale + mhc_base).sigmoid()
    gz = output_mix_grad * (1 - s) * s
    r = gz.shape[-1]
    scale_grad = (gz * input_mix).reshape(-1, r).sum(0).sum().reshape(1)
    return gz * mhc_scale, scale_grad, gz.reshape(-1, r).sum(0)


SPEC = KernelSpec(
    op="mhc_head_compute_mix_backward",
    factory=factory,
    keys=({"dtype": "float32"},),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="block sums through shared memory with __syncthreads only (no AllReduce, "
    "PDL or arch choice): one source on every arch (verify-lowering-classes)",
    doc="grads of mhc_head_compute_mix: input_mix_grad, and mhc_scale_grad / mhc_base_grad "
    "summed over tokens in a fixed order.",
)
