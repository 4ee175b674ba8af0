"""The best expert groups of each token, ranked by the sum of their top scores.

For each token ``t`` of ``scores[T, G, S]`` (float32: G groups of S experts)::

    value[t, g]     = the sum of the n largest scores[t, g, :]  (n = 1 or 2; float32)
    group_idx[t, :] = the K groups of largest value, largest first: equal values go to the
                      smaller group, a NaN value ranks above everything (+inf included)

This is TileKernels 1.0.0's ``topk_sum_and_topk_group_idx`` (``tile_kernels.torch.topk``: a
``topk`` whose values are summed, then its ``stable_topk``, a stable descending sort), the
group stage of DeepSeek-V3's router. A NaN score is the largest of its group (torch's
``topk``), so its group's value is NaN; ``+inf + -inf`` is NaN too. -0.0 ties with +0.0.

Kernel: a warp per token, lane ``g < G`` owns group g and reads its S scores (a serial loop
over the runtime S), keeping the largest two in int32 order keys (``order_key``: NaN largest,
-0 as +0). The group's value is ``top1 + top2`` (or top1), and its rank is the number of groups
that beat it, counted over G shuffles: the lane whose rank is below K writes its group index
there. One generic variant: G <= 32 (a lane per group), S, K and n at run time.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .order_key import INT_MIN, key, value

DTYPES = ("float32",)
MAX_GROUPS = 32  # a lane per group
THREADS = 128  # 4 tokens (warps) per block


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(scores[T, G, S] f32, group_idx[T, K] i32, n: i32)``.

    ``arch`` does not change the code (shuffles and float math on every target).
    """
    if dtype not in DTYPES:
        raise ValueError(f"topk_sum_and_topk_group_idx: unsupported dtype {dtype!r}")
    return _kernel()


def _kernel():
    import tilelang.language as T

    Tn = T.dynamic("T")
    G = T.dynamic("G")
    S = T.dynamic("S")
    K = T.dynamic("K")
    tokens = THREADS // 32

    @T.prim_func
    def topk_sum_and_topk_group_idx(
        scores: T.Tensor((Tn, G, S), "float32"),
        group_idx: T.Tensor((Tn, K), "int32"),
        n: T.int32,
    ):
        with T.Kernel(ceildiv(T, Tn, tokens), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            tok = bx * tokens + tx // 32
            # Past-the-end warps of the last block redo the last token (never stored): the
            # warp always runs whole, for its shuffles.
            row = T.min(tok, Tn - 1)
            grp = T.min(lane, G - 1)
            top1 = T.alloc_var("int32", init=INT_MIN)  # keys: -inf's is above INT_MIN
            top2 = T.alloc_var("int32", init=INT_MIN)
            v = T.alloc_var("float32")
            total = T.alloc_var("float32")
            gkey = T.alloc_var("int32")
            rank = T.alloc_var("int32", init=0)
            for j in T.serial(S):
                v = scores[row, grp, j]
                top2 = T.max(top2, T.min(top1, key(v)))
                top1 = T.max(top1, key(v))
            # With n == 2, S >= 2 (the wrapper checks): top2 holds a real score.
            total = T.ieee_add(value(top1), value(top2))
            gkey = T.if_then_else(n == 1, top1, key(total))
            for i in T.serial(G):
                other = T.shfl_sync(gkey, i)
                if (other > gkey) | ((other == gkey) & (i < lane)):
                    rank = rank + 1
            if (tok < Tn) & (lane < G) & (rank < K):
                group_idx[tok, rank] = lane

    return topk_sum_and_topk_group_idx


def reference(scores, num_topk_sum: int, num_topk_groups: int):
    """torch reference, TileKernels' semantics: each group's n largest scores summed in
    float32 (NaN largest), the groups ranked by a stable descending sort; int32 indices."""
    import torch

    s = scores.float()
    top = torch.sort(s, dim=-1, descending=True).values[..., :num_topk_sum]
    value = top[..., 0] if num_topk_sum == 1 else top[..., 0] + top[..., 1]
    order = torch.sort(value, dim=-1, descending=True, stable=True).indices
    return order[:, :num_topk_groups].to(torch.int32)


SPEC = KernelSpec(
    op="topk_sum_and_topk_group_idx",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="group_idx = the K groups of scores[T, G, S] with the largest top-1 or top-2 sums "
    "(ties: smaller group, NaN first).",
)
