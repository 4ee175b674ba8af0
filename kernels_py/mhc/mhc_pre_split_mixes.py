"""mHC pre-mix split, forward: one token's raw mixes into its pre, post and residual mixes.

TileKernels' ``mhc_pre_split_mixes`` (`tile-kernels` 1.0.0: reference
``tile_kernels.torch.mhc.mhc_pre_split_mixes_ref``, kernel
``tile_kernels/mhc/pre_split_mixes_kernel.py``). With ``K = R * (R + 2)`` raw mixes per token
in three segments (R pre, R post, R * R residual), a per-segment scale ``mhc_scale[3]`` and a
per-column bias ``mhc_base[K]``, in float32::

    z[t, j]                 = x[t, j] * mhc_scale[seg(j)] + mhc_base[j]
    pre_layer_mix[t, j, 0]  = sigmoid(z[t, j]) + mhc_pre_eps                 j < R
    post_layer_mix[t, j, 0] = sigmoid(z[t, R + j]) * mhc_post_mult_value    j < R
    comb_res_mix[t, m, n]   = z[t, 2 R + m R + n]

each step rounded as torch rounds it (the product, then the sum: no FMA; ``sigmoid(z) =
1 / (1 + expf(-z))`` with a correctly rounded division, then the eps or the factor), so that
the result is the reference's evaluated on the GPU.

One thread per raw mix (``M * K`` of them, 256 per block, in memory order: the reads of
``x`` and the writes of each output are coalesced); the column ``j = i % K`` picks the
segment. Memory-bound and tiny (96 bytes in and out per token at R = 4). One generic
variant (M, K, R runtime; the wrapper checks ``K = R * (R + 2)``).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec

THREADS = 256


def affine(T, x, scale, base):
    """``x * scale + base`` rounded twice, as torch's separate mul and add (no FMA)."""
    return T.ieee_add(T.ieee_mul(x, scale), base)


def sigmoid(T, z):
    """``1 / (1 + expf(-z))``, the division correctly rounded (torch's float formula)."""
    return T.ieee_fdiv(T.float32(1), T.float32(1) + T.exp(-z))


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(input_mixes[M, K], mhc_scale[3], mhc_base[K], pre_layer_mix[M, R,
    1], post_layer_mix[M, R, 1], comb_res_mix[M, R, R], mhc_post_mult_value, mhc_pre_eps)``.
    ``arch`` does not change the code."""
    if dtype != "float32":
        raise ValueError(f"mhc_pre_split_mixes: unsupported dtype {dtype!r}")
    import tilelang.language as T

    M, K, R = T.dynamic("M"), T.dynamic("K"), T.dynamic("R")

    @T.prim_func
    def mhc_pre_split_mixes(
        input_mixes: T.Tensor((M, K), "float32"),
        mhc_scale: T.Tensor((3,), "float32"),
        mhc_base: T.Tensor((K,), "float32"),
        pre_layer_mix: T.Tensor((M, R, 1), "float32"),
        post_layer_mix: T.Tensor((M, R, 1), "float32"),
        comb_res_mix: T.Tensor((M, R, R), "float32"),
        mhc_post_mult_value: T.float32,
        mhc_pre_eps: T.float32,
    ):
        with T.Kernel(ceildiv(T, M * K, THREADS), threads=THREADS) as b:
            tx = T.get_thread_binding()
            # b * THREADS < M * K: the test never forms an index past int32.
            if tx < M * K - b * THREADS:
                i = b * THREADS + tx
                # Bound variables with their ranges stated: no floor-division fix-ups and no
                # bounds checks on the accesses (TileLang cannot derive them from i < M * K).
                t = T.alloc_var("int32", init=T.truncdiv(i, K))
                j = T.alloc_var("int32", init=T.truncmod(i, K))
                T.assume((0 <= t) & (t < M) & (0 <= j) & (j < K))
                x = input_mixes[t, j]
                if j < R:
                    z = affine(T, x, mhc_scale[0], mhc_base[j])
                    pre_layer_mix[t, j, 0] = sigmoid(T, z) + mhc_pre_eps
                elif j < 2 * R:
                    z = affine(T, x, mhc_scale[1], mhc_base[j])
                    post_layer_mix[t, j - R, 0] = sigmoid(T, z) * mhc_post_mult_value
                else:
                    m = T.alloc_var("int32", init=T.truncdiv(j, R) - 2)
                    n = T.alloc_var("int32", init=T.truncmod(j, R))
                    T.assume((0 <= m) & (m < R) & (0 <= n) & (n < R))
                    comb_res_mix[t, m, n] = affine(T, x, mhc_scale[2], mhc_base[j])

    return mhc_pre_split_mixes


def scales(mhc_scale, r: int):
    """``mhc_scale[seg(j)]`` for the K columns: each segment's scale repeated over it."""
    import torch

    seg = torch.tensor([0] * r + [1] * r + [2] * r * r, device=mhc_scale.device)
    return mhc_scale[seg]


def reference(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps):
    """torch reference, float32 as documented (differentiable): ``input_mixes[..., K]`` ->
    ``(pre_layer_mix[..., R, 1], post_layer_mix[..., R, 1], comb_res_mix[..., R, R])``."""
    r = mhc_mult
    z = input_mixes * scales(mhc_scale, r) + mhc_base
    pre = (z[..., :r].sigmoid() + mhc_pre_eps).unsqueeze(-1)
    post = (z[..., r : 2 * r].sigmoid() * mhc_post_mult_value).unsqueeze(-1)
    comb = z[..., 2 * r :].reshape(*z.shape[:-1], r, r)
    return pre, post, comb


SPEC = KernelSpec(
    op="mhc_pre_split_mixes",
    factory=factory,
    keys=({"dtype": "float32"},),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="mHC mix split: [T, R(R+2)] fp32 -> sigmoid pre + eps, sigmoid post * c [T, R, 1], "
    "comb [T, R, R].",
)
