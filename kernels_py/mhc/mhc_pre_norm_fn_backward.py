"""mHC pre-norm projection, backward: the gradients of mhc_pre_norm_fn (see mhc_pre_norm_fn.py).

Per token, with ``x = residual[t]`` flattened to ``K = R * H`` values, ``d[n] = x . mhc_fn[n]``,
``s = sum_k x[k]**2``, ``r = rsqrt(s / K + eps)`` (the forward's ``out[t, n] = d[n] * r``) and
``g = out_grad[t]``::

    gd[n] = g[n] * r                                      (the gradient of d[n])
    gs    = -(sum_n g[n] * d[n]) * r / (s + eps * K) / 2  (the gradient of s)
    residual_grad[t, k] = bf16(sum_n gd[n] * mhc_fn[n, k] + 2 * x[k] * gs)
    mhc_fn_grad[n, k]   = sum_t gd[n] * x[k]

(TileKernels' backward, ``tile_kernels/modeling/mhc/ops/norm_fn.py`` of `tile-kernels` 1.0.0,
computes the same from the forward's saved ``d`` and ``s``.) Three launches, TileKernels'
split (kernels_py/mhc/norm_fn_tc.py), every sum in a fixed order (no atomics):

1. ``mul``, the forward's: ``d`` and ``s`` per token in 16 column slices, into the scratch
   ``part[16, M, 33]`` (tensor cores, ``mhc_fn`` rounded to TF32);
2. ``grad_norm``: the slices summed in order, then ``gd`` and ``gs`` into the scratch
   ``stats[M, N + 1]``;
3. ``grad_mul``: per block of 128 columns of one stream, every token in tiles of 64 in order:
   ``mhc_fn_grad += gd.T @ x`` and ``residual_grad = gd @ mhc_fn + 2 x gs`` (two T.gemm, ``gd``
   rounded to TF32 as TileKernels' ``round_to_tf32``); no partial sums of mhc_fn_grad.

Variants as the forward's: N = 24 and a generic N <= 32; the archs as the forward's.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..spec import KernelSpec
from . import norm_fn_tc
from .mhc_pre_norm_fn import SPLITS, STATIC_N, W, spec_error_of, variant


def factory(arch: str, dtype: str, N: int | None = None):
    """TileLang prim_func ``(out_grad[M, N], residual[M, R, H], mhc_fn[N, R, H],
    residual_grad[M, R, H], mhc_fn_grad[N, R, H], stats[M, N + 1], part[16, M, 33],
    mhc_norm_eps)``; ``N`` fixed when given. ``arch`` does not change the code."""
    T, M, R, H, N, kernels = variant("mhc_pre_norm_fn_backward", dtype, N)

    @T.prim_func
    def mhc_pre_norm_fn_backward(
        out_grad: T.Tensor((M, N), "float32"),
        residual: T.Tensor((M, R, H), "bfloat16"),
        mhc_fn: T.Tensor((N, R, H), "float32"),
        residual_grad: T.Tensor((M, R, H), "bfloat16"),
        mhc_fn_grad: T.Tensor((N, R, H), "float32"),
        stats: T.Tensor((M, N + 1), "float32"),
        part: T.Tensor((SPLITS, M, W), "float32"),
        mhc_norm_eps: T.float32,
    ):
        kernels.mul(residual, mhc_fn, part)
        kernels.grad_norm(out_grad, part, stats, mhc_norm_eps)
        kernels.grad_mul(residual, mhc_fn, stats, residual_grad, mhc_fn_grad)

    return mhc_pre_norm_fn_backward


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
    lowering_classes=norm_fn_tc.LOWERING_CLASSES,
    lowering_reason="the forward's: TF32 mma.sync from sm_80 on (no wgmma, no tcgen05), "
    "TileLang's CUDA-core loop on sm_70 / sm_75; no PDL or arch choice",
    doc="grads of mhc_pre_norm_fn: residual_grad (bf16) and mhc_fn_grad summed over tokens "
    "in a fixed order.",
)
