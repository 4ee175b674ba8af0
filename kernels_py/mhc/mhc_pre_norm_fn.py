"""mHC pre-norm projection, forward: the RMS-normalised mixes of each token's residual streams.

TileKernels' ``mhc_pre_norm_fn`` (`tile-kernels` 1.0.0: reference
``tile_kernels.torch.mhc.mhc_pre_norm_fn_ref``, kernel ``tile_kernels/mhc/norm_fn_kernel.py``),
per token with ``x = residual[t]`` flattened to ``K = R * H`` values::

    out[t, n] = (sum_k x[k] * mhc_fn[n, k]) * rsqrt(sum_k x[k]**2 / K + eps)

``residual[T, R, H]`` bf16, ``mhc_fn[N, K]`` float32 (N = R * (R + 2) mixes in the models, at
most ``MAX_N`` = 32 as TileKernels' kernel), ``out[T, N]`` float32. As TileKernels' kernel,
the dot products run on tensor cores with ``mhc_fn`` rounded to TF32 (kernels_py/mhc/
norm_fn_tc.py): two launches, ``mul`` (blocks of 32 tokens x one of 16 column slices, T.gemm,
partial sums into the scratch ``part[16, M, 33]``) and ``norm`` (the slices summed in order,
times the rsqrt). Within TileKernels' test bound (``atol = rtol = 1e-3``) of its float32
reference; deterministic (no atomics).

Archs: T.gemm of float32 operands lowers to ``mma.sync`` TF32 (m16n8k8) on sm_80, sm_90a
(no wgmma: it needs TF32-typed buffers), sm_100f (no tcgen05: no tensor-memory accumulator)
and sm_120f, one source for the four; on sm_70 / sm_75 (no TF32 MMA) TileLang lowers it to
its CUDA-core loop over the same shared tiles (the same rounded operands, float32 FMAs).

Variants: N = 24 (R = 4) and a generic N <= 32 (both pad the mixes to 32 in the MMA).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..spec import KernelSpec
from . import norm_fn_tc

MAX_N = norm_fn_tc.NP  # mixes per token (TileKernels' kernel pads them to 32 as well)
STATIC_N = (24,)  # R = 4: 2R + R*R mixes
SPLITS, W = norm_fn_tc.SPLITS, norm_fn_tc.W  # the scratch part[SPLITS, M, W]


def factory(arch: str, dtype: str, N: int | None = None):
    """TileLang prim_func ``(residual[M, R, H], mhc_fn[N, R, H], out[M, N], part[16, M, 33],
    mhc_norm_eps)`` (``mhc_fn`` is TileKernels' ``[N, R * H]`` viewed by stream; ``part`` the
    scratch of the column slices); ``N`` fixed when given. ``arch`` does not change the code
    (TileLang picks the MMA or, before sm_80, its CUDA-core loop)."""
    T, M, R, H, N, kernels = variant("mhc_pre_norm_fn", dtype, N)

    @T.prim_func
    def mhc_pre_norm_fn(
        residual: T.Tensor((M, R, H), "bfloat16"),
        mhc_fn: T.Tensor((N, R, H), "float32"),
        out: T.Tensor((M, N), "float32"),
        part: T.Tensor((SPLITS, M, W), "float32"),
        mhc_norm_eps: T.float32,
    ):
        kernels.mul(residual, mhc_fn, part)
        kernels.norm(part, out, mhc_norm_eps)

    return mhc_pre_norm_fn


def variant(op: str, dtype: str, N: int | None):
    """What a kernel of `op` (this one or its backward) builds on: ``(T, M, R, H, N,
    kernels)``, the dynamic sizes (N static when given) and the launches' macros
    (norm_fn_tc.Kernels)."""
    if dtype != "bfloat16":
        raise ValueError(f"{op}: unsupported dtype {dtype!r}")
    error = spec_error_of(op)({"dtype": dtype}, {} if N is None else {"N": N})
    if error:
        raise ValueError(error)
    import tilelang.language as T

    M, R, H = T.dynamic("M"), T.dynamic("R"), T.dynamic("H")
    N = T.dynamic("N") if N is None else N
    return T, M, R, H, N, norm_fn_tc.Kernels(T, M, R, H, N)


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
    lowering_classes=norm_fn_tc.LOWERING_CLASSES,
    lowering_reason="T.gemm: TF32 mma.sync from sm_80 on (no wgmma, no tcgen05), TileLang's "
    "CUDA-core loop on sm_70 / sm_75; no PDL or arch choice",
    doc="mHC pre-norm mixes: (x . fn[n]) * rsqrt(mean(x^2) + eps) per token; bf16 x, fp32 out.",
)
