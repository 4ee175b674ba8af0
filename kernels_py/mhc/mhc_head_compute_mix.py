"""mHC head mix, forward: the pre mix of the model's last (head) mHC step.

TileKernels' ``mhc_head_compute_mix`` (`tile-kernels` 1.0.0: reference
``tile_kernels.torch.mhc.mhc_head_compute_mix_ref``, kernel
``tile_kernels/mhc/head_compute_mix_kernel.py``): ``input_mix[T, R]``, one scale
``mhc_scale[1]``, per-column biases ``mhc_base[R]``, in float32::

    output_mix[t, j] = sigmoid(input_mix[t, j] * mhc_scale[0] + mhc_base[j]) + mhc_pre_eps

rounded as mhc_pre_split_mixes' pre segment is (kernels_py/mhc/mhc_pre_split_mixes.py: the
product, the sum, ``1 / (1 + expf(-z))`` correctly rounded, then the eps), the reference's
values on the GPU. One thread per element, 256 per block, in memory order; one generic
variant (M, R runtime).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .mhc_pre_split_mixes import THREADS, affine, sigmoid


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(input_mix[M, R], mhc_scale[1], mhc_base[R], output_mix[M, R],
    mhc_pre_eps)``. ``arch`` does not change the code."""
    if dtype != "float32":
        raise ValueError(f"mhc_head_compute_mix: unsupported dtype {dtype!r}")
    import tilelang.language as T

    M, R = T.dynamic("M"), T.dynamic("R")

    @T.prim_func
    def mhc_head_compute_mix(
        input_mix: T.Tensor((M, R), "float32"),
        mhc_scale: T.Tensor((1,), "float32"),
        mhc_base: T.Tensor((R,), "float32"),
        output_mix: T.Tensor((M, R), "float32"),
        mhc_pre_eps: T.float32,
    ):
        with T.Kernel(ceildiv(T, M * R, THREADS), threads=THREADS) as b:
            tx = T.get_thread_binding()
            if tx < M * R - b * THREADS:  # b * THREADS < M * R: no index past int32
                i = b * THREADS + tx
                t = T.alloc_var("int32", init=T.truncdiv(i, R))
                j = T.alloc_var("int32", init=T.truncmod(i, R))
                T.assume((0 <= t) & (t < M) & (0 <= j) & (j < R))  # no bounds checks
                z = affine(T, input_mix[t, j], mhc_scale[0], mhc_base[j])
                output_mix[t, j] = sigmoid(T, z) + mhc_pre_eps

    return mhc_head_compute_mix


def reference(input_mix, mhc_scale, mhc_base, mhc_pre_eps):
    """torch reference, float32 as documented (differentiable)."""
    return (input_mix * mhc_scale + mhc_base).sigmoid() + mhc_pre_eps


SPEC = KernelSpec(
    op="mhc_head_compute_mix",
    factory=factory,
    keys=({"dtype": "float32"},),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="mHC head mix: sigmoid(input_mix * scale + base) + eps, [T, R] fp32.",
)
