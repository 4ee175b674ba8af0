"""Expert indices masked to one tensor-parallel rank and renumbered locally (TileKernels 1.0.0's
``mask_indices_by_tp``).

With ``R = per_gpu`` experts per rank (``n // num_ep_ranks``) and ``D = per_dp = R *
num_tp_ranks`` experts per data-parallel group, an index ``i`` of ``indices[T, K]`` becomes::

    -1                                    if i < 0 or (i // R) % num_tp_ranks != tp_rank
    j - (j // D) * (D - R), j = i - tp_rank * R      otherwise

(kept indices are >= tp_rank * R, so every division here is of non-negative values and
floor and truncation agree). int32 in and out.

Kernel: a thread per index (row ``i // K``, column ``i % K``), 256 per block. One
generic variant.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec

DTYPES = ("int32",)
THREADS = 256


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(indices[T, K] i32, masked[T, K] i32, per_gpu, per_dp,
    num_tp_ranks, tp_rank: i32)``. ``arch`` does not change the code."""
    if dtype not in DTYPES:
        raise ValueError(f"mask_indices_by_tp: unsupported dtype {dtype!r}")
    return _kernel()


def _kernel():
    import tilelang.language as T

    Tn = T.dynamic("T")
    K = T.dynamic("K")

    @T.prim_func
    def mask_indices_by_tp(
        indices: T.Tensor((Tn, K), "int32"),
        masked: T.Tensor((Tn, K), "int32"),
        per_gpu: T.int32,
        per_dp: T.int32,
        num_tp_ranks: T.int32,
        tp_rank: T.int32,
    ):
        with T.Kernel(ceildiv(T, Tn * K, THREADS), threads=THREADS) as bx:
            i = bx * THREADS + T.get_thread_binding()
            v = T.alloc_var("int32")
            j = T.alloc_var("int32")
            if i < Tn * K:
                v = indices[i // K, i % K]
                # From max(v, 0): a negative index is dropped anyway, and must not overflow.
                j = T.max(v, 0) - tp_rank * per_gpu
                j = j - T.truncdiv(j, per_dp) * (per_dp - per_gpu)
                keep = (v >= 0) & (T.truncmod(T.truncdiv(v, per_gpu), num_tp_ranks) == tp_rank)
                masked[i // K, i % K] = T.if_then_else(keep & (j >= 0), j, -1)

    return mask_indices_by_tp


def reference(indices, n: int, num_ep_ranks: int, tp_rank: int, num_tp_ranks: int):
    """torch reference, TileKernels' semantics (module docstring), in the indices' dtype."""
    import torch

    per_gpu = n // num_ep_ranks
    per_dp = per_gpu * num_tp_ranks
    i = indices
    j = i - tp_rank * per_gpu
    j = j - torch.div(j, per_dp, rounding_mode="floor") * (per_dp - per_gpu)
    rank = torch.div(i, per_gpu, rounding_mode="floor") % num_tp_ranks
    keep = (i >= 0) & (rank == tp_rank) & (j >= 0)
    return torch.where(keep, j, torch.full_like(i, -1))


SPEC = KernelSpec(
    op="mask_indices_by_tp",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="masked = indices[T, K] of this TP rank's experts renumbered locally, -1 elsewhere.",
)
