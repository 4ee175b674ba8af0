"""Each token's top-k weights divided by their sum (TileKernels 1.0.0's ``normalize_weight``).

For each row ``t`` of ``topk_weights[T, K]`` (float32)::

    denominator[t]           = ((1e-20 + w[t, 0]) + w[t, 1]) + ... + w[t, K - 1]
    normalized_weights[t, j] = w[t, j] / denominator[t]

in float32, summed left to right from 1e-20 (as TileKernels' kernel and reference, which keeps
a row of zeros finite: 0 / 1e-20 = 0), IEEE division. NaN and inf propagate as in torch.

Kernel: a thread per row, 128 rows per block. Generic: K (a runtime size) summed in a serial
loop, then the row re-read (from L1) and divided; its 4-byte loads at a K-element stride across a
warp are uncoalesced (ncu, H200, 2026-12-03: 5.1 us for 32768 x 8, 11 % occupancy, DRAM 4 %).
A static K (STATIC_K: the top-k of DeepSeek-V3, Qwen3, GLM) loads and stores the row in 16-byte
vectors held in registers: one pass over memory, the same left-to-right sum.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec

DTYPES = ("float32",)
THREADS = 128
STATIC_K = (8,)  # specialised top-k sizes
MAX_STATIC_K = 64  # a static row lives in registers
FLOOR = 1e-20  # the sum's start: TileKernels' "align with top2_sum_gate" epsilon


def factory(arch: str, dtype: str, K: int | None = None):
    """TileLang prim_func ``(topk_weights[T, K] f32, denominator[T] f32,
    normalized_weights[T, K] f32)``. ``arch`` does not change the code."""
    if dtype not in DTYPES:
        raise ValueError(f"normalize_weight: unsupported dtype {dtype!r}")
    if K is not None and not (isinstance(K, int) and 0 < K <= MAX_STATIC_K):
        raise ValueError(
            f"normalize_weight: a static K must be 1 <= K <= {MAX_STATIC_K}; got {K!r}"
        )
    return _kernel() if K is None else _static_kernel(K)


def _static_kernel(k: int):
    """The row in registers: 16-byte vector loads and stores where K allows (4, 2 or 1 floats;
    the schema's 16-byte pointer rule and a row of K floats keep every vector aligned only when
    the width divides K, hence the largest such width)."""
    import tilelang.language as T

    Tn = T.dynamic("T")
    vec = 4 if k % 4 == 0 else 2 if k % 2 == 0 else 1

    @T.prim_func
    def normalize_weight(
        topk_weights: T.Tensor((Tn, k), "float32"),
        denominator: T.Tensor((Tn,), "float32"),
        normalized_weights: T.Tensor((Tn, k), "float32"),
    ):
        with T.Kernel(ceildiv(T, Tn, THREADS), threads=THREADS) as bx:
            row = bx * THREADS + T.get_thread_binding()
            w = T.alloc_local((k,), "float32")
            total = T.alloc_var("float32", init=T.float32(FLOOR))
            if row < Tn:
                for c in T.unroll(k // vec):
                    for j in T.vectorized(vec):
                        w[c * vec + j] = topk_weights[row, c * vec + j]
                for j in T.unroll(k):
                    total = T.ieee_add(total, w[j])
                denominator[row] = total
                for j in T.unroll(k):
                    w[j] = T.ieee_fdiv(w[j], total)
                for c in T.unroll(k // vec):
                    for j in T.vectorized(vec):
                        normalized_weights[row, c * vec + j] = w[c * vec + j]

    return normalize_weight


def _kernel():
    import tilelang.language as T

    Tn = T.dynamic("T")
    K = T.dynamic("K")

    @T.prim_func
    def normalize_weight(
        topk_weights: T.Tensor((Tn, K), "float32"),
        denominator: T.Tensor((Tn,), "float32"),
        normalized_weights: T.Tensor((Tn, K), "float32"),
    ):
        with T.Kernel(ceildiv(T, Tn, THREADS), threads=THREADS) as bx:
            row = bx * THREADS + T.get_thread_binding()
            total = T.alloc_var("float32", init=T.float32(FLOOR))
            if row < Tn:
                for j in T.serial(K):
                    total = T.ieee_add(total, topk_weights[row, j])
                denominator[row] = total
                for j in T.serial(K):
                    normalized_weights[row, j] = T.ieee_fdiv(topk_weights[row, j], total)

    return normalize_weight


def reference(topk_weights):
    """torch reference, TileKernels' semantics: ``(denominator, normalized_weights)``, the sum
    taken column by column from 1e-20 in float32, then one float32 division per weight."""
    import torch

    w = topk_weights.float()
    total = torch.full(w.shape[:1], FLOOR, dtype=torch.float32, device=w.device)
    for column in w.unbind(dim=1):
        total = total + column
    return total, w / total[:, None]


SPEC = KernelSpec(
    op="normalize_weight",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({}, *({"K": k} for k in STATIC_K)),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="denominator, normalized_weights = the row sums of topk_weights[T, K] (from 1e-20) and "
    "the weights divided by them.",
)
