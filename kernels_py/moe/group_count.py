"""Tokens per group: a histogram of group (expert) indices (TileKernels 1.0.0's
``group_count``).

``counts[g]`` = the number of entries of ``group_idx[T, K]`` equal to g, for ``0 <= g < G``;
negative entries are padding and not counted (as TileKernels); entries ``>= G`` are not counted
either (TileKernels' kernel stops on them with a device assert and its reference raises).
int32 in and out.

Two kernels in order: the first zeroes ``counts`` (a thread per group); the second gives each
256-thread block ``CHUNK`` consecutive entries (coalesced, ``ITEMS`` per thread), counted with
shared-memory atomics in a histogram of G bins, then added to ``counts`` with one global
atomic per nonzero bin. G is a runtime size: groups past ``MAX_GROUPS`` (the shared
histogram's size) are counted with global atomics directly. One generic variant. The counts
are exact integers: the order of the atomics does not matter.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec

DTYPES = ("int32",)
THREADS = 256
ITEMS = 8  # entries per thread
CHUNK = THREADS * ITEMS  # entries per block
MAX_GROUPS = 8192  # bins of the shared histogram (32 KB); larger groups: global atomics


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(group_idx[T, K] i32, counts[G] i32)``. ``arch`` does not change
    the code."""
    if dtype not in DTYPES:
        raise ValueError(f"group_count: unsupported dtype {dtype!r}")
    return _kernel()


def _kernel():
    import tilelang.language as T

    Tn = T.dynamic("T")
    K = T.dynamic("K")
    G = T.dynamic("G")

    histogram = histogram_kernels()

    @T.prim_func
    def group_count(
        group_idx: T.Tensor((Tn, K), "int32"),
        counts: T.Tensor((G,), "int32"),
    ):
        histogram(group_idx, counts)

    return group_count


def histogram_kernels():
    """A ``T.macro`` of the two kernels that write ``counts[G]`` = the histogram of
    ``group_idx[Tn, K]`` (entries outside ``[0, G)`` not counted); `aux_fi` counts with it too."""
    import tilelang.language as T

    @T.macro
    def histogram(group_idx, counts):
        # sizes read off the buffers where used: a local name would rename them in the source
        with T.Kernel(ceildiv(T, counts.shape[0], THREADS), threads=THREADS) as bx:
            g = bx * THREADS + T.get_thread_binding()
            if g < counts.shape[0]:
                counts[g] = 0
        entries = group_idx.shape[0] * group_idx.shape[1]
        with T.Kernel(ceildiv(T, entries, CHUNK), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            hist = T.alloc_shared((MAX_GROUPS,), "int32")
            vals = T.alloc_local((ITEMS,), "int32")
            bins = T.min(counts.shape[0], MAX_GROUPS)
            # All ITEMS loads first, then the atomics: loads interleaved with atomics on one
            # variable ran one DRAM round trip at a time (ncu, H200: ~7 us per block at any T).
            for it in T.unroll(ITEMS):
                e = bx * CHUNK + it * THREADS + tx
                vals[it] = -1
                if e < entries:
                    vals[it] = group_idx[e // group_idx.shape[1], e % group_idx.shape[1]]
            for r in T.serial(T.ceildiv(bins, THREADS)):
                if r * THREADS + tx < bins:
                    hist[r * THREADS + tx] = 0
            T.sync_threads()
            for it in T.unroll(ITEMS):
                if (vals[it] >= 0) & (vals[it] < bins):
                    T.atomic_add(hist[vals[it]], 1)
                elif (vals[it] >= bins) & (vals[it] < counts.shape[0]):  # past the histogram
                    T.atomic_add(counts[vals[it]], 1)
            T.sync_threads()
            for r in T.serial(T.ceildiv(bins, THREADS)):
                if r * THREADS + tx < bins:
                    if hist[r * THREADS + tx] > 0:
                        T.atomic_add(counts[r * THREADS + tx], hist[r * THREADS + tx])

    return histogram


def reference(group_idx, num_groups: int):
    """torch reference, TileKernels' semantics: int32 counts of the entries in [0, G)."""
    import torch

    valid = group_idx[(group_idx >= 0) & (group_idx < num_groups)].long()
    return torch.bincount(valid, minlength=num_groups).to(torch.int32)


SPEC = KernelSpec(
    op="group_count",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="counts[G] = how many entries of group_idx[T, K] hold each group (negatives ignored).",
)
