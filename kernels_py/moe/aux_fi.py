"""Auxiliary-loss frequency indicator per expert (TileKernels 1.0.0's ``aux_fi``).

``out[e] = counts[e] * E / (T * A)`` in float32, where ``counts[e]`` is the number of entries
of ``topk_idx[T, K]`` equal to e (``0 <= e < E``), A is ``num_aux_topk`` and T the token count.
Rounded as TileKernels' reference (tile_kernels/torch/moe.py ``aux_fi``) rounds it:
``float32(count) * float32(E)``, then one IEEE division by ``float32(T * A)``. Negative entries
are padding and not counted; entries ``>= E`` are not counted either (TileKernels' kernel stops
on them with a device assert, its reference raises). int32 indices.

Three kernels in order: zero the int32 ``counts`` scratch, count the entries into it (the
histogram of `group_count`, shared with it), then a thread per expert divides. The counts are
exact integers and each quotient is one rounding, so the result is the same on every run (unlike
TileKernels' kernel, which adds per-block quotients with float atomics). One generic variant.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from . import group_count

DTYPES = ("int32",)
THREADS = 256


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(topk_idx[T, K] i32, out[E] f32, counts[E] i32 scratch,
    num_aux_topk i32)``. ``arch`` does not change the code."""
    if dtype not in DTYPES:
        raise ValueError(f"aux_fi: unsupported dtype {dtype!r}")
    return _kernel()


def _kernel():
    import tilelang.language as T

    Tn = T.dynamic("T")
    K = T.dynamic("K")
    E = T.dynamic("E")
    histogram = group_count.histogram_kernels()

    @T.prim_func
    def aux_fi(
        topk_idx: T.Tensor((Tn, K), "int32"),
        out: T.Tensor((E,), "float32"),
        counts: T.Tensor((E,), "int32"),
        num_aux_topk: T.int32,
    ):
        histogram(topk_idx, counts)
        with T.Kernel(ceildiv(T, E, THREADS), threads=THREADS) as bx:
            e = bx * THREADS + T.get_thread_binding()
            # float32(T * A) from the exact 64-bit product: one rounding, as torch's
            # division by the Python int num_tokens * num_aux_topk
            denom = T.cast(T.cast(Tn, "int64") * T.cast(num_aux_topk, "int64"), "float32")
            if e < E:
                scaled = T.cast(counts[e], "float32") * T.cast(E, "float32")
                out[e] = T.ieee_fdiv(scaled, denom)

    return aux_fi


def reference(topk_idx, num_experts: int, num_aux_topk: int):
    """torch reference, TileKernels' semantics: float32 ``count * E / (T * A)`` per expert of
    the entries in [0, E) (zeros when there are no tokens)."""
    import torch

    num_tokens = topk_idx.shape[0]
    if num_tokens == 0:
        return torch.zeros(num_experts, dtype=torch.float32, device=topk_idx.device)
    valid = topk_idx[(topk_idx >= 0) & (topk_idx < num_experts)].long()
    counts = torch.bincount(valid, minlength=num_experts)
    return counts.float() * num_experts / (num_tokens * num_aux_topk)


SPEC = KernelSpec(
    op="aux_fi",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="group_count's histogram plus per-thread division: no block-wide "
    "reduction, PDL or arch choice",
    doc="out[E] = count of each expert in topk_idx[T, K] * E / (T * num_aux_topk), float32.",
)
