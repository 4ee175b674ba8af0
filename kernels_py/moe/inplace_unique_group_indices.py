"""Each row's group indices without repeats (TileKernels 1.0.0's
``inplace_unique_group_indices``).

``out[t, j] = -1`` where ``group_indices[t, j]`` equals an entry to its left in row t
(``group_indices[t, i]`` for some ``i < j``), else ``group_indices[t, j]``: the first
(leftmost) occurrence of each value stays, later ones become -1 — TileKernels' reference
(tile_kernels/torch/moe.py), which compares every value, negative ones included (a repeated
-5 becomes -1; a repeated -1 stays -1). Its kernel skips negative entries and takes groups
below 128 only; any int32 value works here. int32 in and out.

One kernel, a thread per row: entry j is compared with the j entries before it (K is small:
the groups a token picks), all read from the input, so `out` never feeds back. The caller
wanting TileKernels' in-place update copies `out` into the input (tileaot.tile_kernels does).
One generic variant.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec

DTYPES = ("int32",)
THREADS = 256


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(group_indices[T, K] i32, out[T, K] i32)``. ``arch`` does not
    change the code."""
    if dtype not in DTYPES:
        raise ValueError(f"inplace_unique_group_indices: unsupported dtype {dtype!r}")
    return _kernel()


def _kernel():
    import tilelang.language as T

    Tn = T.dynamic("T")
    K = T.dynamic("K")

    @T.prim_func
    def inplace_unique_group_indices(
        group_indices: T.Tensor((Tn, K), "int32"),
        out: T.Tensor((Tn, K), "int32"),
    ):
        with T.Kernel(ceildiv(T, Tn, THREADS), threads=THREADS) as bx:
            t = bx * THREADS + T.get_thread_binding()
            seen = T.alloc_var("int32")
            if t < Tn:
                for j in T.serial(K):
                    seen = 0
                    for i in T.serial(j):
                        if group_indices[t, i] == group_indices[t, j]:
                            seen = 1
                    out[t, j] = T.Select(seen == 1, -1, group_indices[t, j])

    return inplace_unique_group_indices


def reference(group_indices, num_groups: int = 0):
    """torch reference, TileKernels' semantics (out of place): `group_indices` with every
    repeat of a value to its left in the row set to -1. `num_groups` is unused (TileKernels'
    reference ignores it too)."""
    import torch

    del num_groups
    k = group_indices.shape[1]
    # repeat[t, j] = any(group_indices[t, i] == group_indices[t, j] for i < j)
    same = group_indices.unsqueeze(2) == group_indices.unsqueeze(1)  # [T, j, i]
    earlier = torch.ones(k, k, dtype=torch.bool, device=group_indices.device).tril(-1)
    repeat = (same & earlier).any(dim=2)
    return torch.where(repeat, torch.full_like(group_indices, -1), group_indices)


SPEC = KernelSpec(
    op="inplace_unique_group_indices",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="per-thread integer compares: no reduction, PDL or arch choice",
    doc="out[T, K] = group_indices with each value repeated to its left in the row set to -1.",
)
