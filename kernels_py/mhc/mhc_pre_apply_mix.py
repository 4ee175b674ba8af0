"""mHC pre-mix, forward: the sublayer's input ``out[t, :] = sum_r mix[t, r] * x[t, r, :]``.

TileKernels' ``mhc_pre_apply_mix`` (`tile-kernels` 1.0.0: reference
``tile_kernels.torch.mhc.mhc_pre_apply_mix_ref`` = ``(x * mix).sum(-2).bfloat16()``, kernel
``tile_kernels/mhc/pre_apply_mix_kernel.py``): ``x[T, R, H]`` bf16 (the R residual streams),
``mix[T, R, 1]`` float32 (the pre-mix weights), ``out[T, H]`` bf16. Each element is a float32
sum from 0 over ``r = 0 .. R - 1`` in order of ``mix[t, r] * x[t, r, h]`` (as TileKernels'
kernel accumulates; the GPU may fuse each step into an FMA), rounded once to bf16.

The kernel is expand_to_mhc_backward's weighted (kernels_py/mhc/expand_to_mhc_backward.py:
``ROWS`` rows x 1024 columns per block of 128 threads, 16-byte loads and stores when
``H % 8 == 0``, element accesses otherwise); one generic variant (R, H runtime).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .expand_to_mhc import COLS, ROWS, THREADS
from .expand_to_mhc_backward import stream_sum_macro


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(x[M, R, H], mix[M, R, 1], out[M, H])``. ``arch`` does not change
    the code."""
    if dtype != "bfloat16":
        raise ValueError(f"mhc_pre_apply_mix: unsupported dtype {dtype!r}")
    import tilelang.language as T

    M, R, H = T.dynamic("M"), T.dynamic("R"), T.dynamic("H")
    stream_sum = stream_sum_macro(T, M, R, H, weighted=True)

    @T.prim_func
    def mhc_pre_apply_mix(
        x: T.Tensor((M, R, H), "bfloat16"),
        mix: T.Tensor((M, R, 1), "float32"),
        out: T.Tensor((M, H), "bfloat16"),
    ):
        with T.Kernel(ceildiv(T, M, ROWS), ceildiv(T, H, COLS), threads=THREADS) as (bm, bc):
            stream_sum(x, mix, out, bm, bc)

    return mhc_pre_apply_mix


def reference(x, mix):
    """torch reference: float32 sums from 0 in r order, rounded to bf16 (differentiable)."""
    import torch

    acc = torch.zeros(x.shape[:-2] + x.shape[-1:], dtype=torch.float32, device=x.device)
    for r in range(x.shape[-2]):
        acc = acc + mix[..., r, :].float() * x[..., r, :].float()
    return acc.to(torch.bfloat16)


SPEC = KernelSpec(
    op="mhc_pre_apply_mix",
    factory=factory,
    keys=({"dtype": "bfloat16"},),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="mHC pre-mix: out = sum_r mix[r] * x[r], [T, R, H] bf16 x [T, R, 1] fp32 -> [T, H] bf16.",
)
