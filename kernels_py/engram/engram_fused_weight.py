"""Engram's fused gate weight: ``w[g, c] = float32(w_h[g, c]) * float32(w_k[g, c])``.

TileKernels' ``fused_weight`` (`tile-kernels` 1.0.0: ``tile_kernels.engram.fused_weight``, run
by ``tile_kernels.modeling.engram.EngramGateFn`` before its forward kernel): the two RMSNorm
weights of the Engram gate, ``weight_hidden`` and ``weight_embed`` ``[hc_mult, H]`` bf16,
multiplied elementwise into one float32 ``[hc_mult, H]``. A product of two bf16 values (8
significant bits each) is exact in float32, so the result is bit-exact whatever the order.

Memory-bound and small (a weight pair: ``hc_mult * H`` elements). A block of ``THREADS``
threads owns one weight row's ``THREADS * VEC`` columns; each thread loads a 16-byte vector
of each weight and stores its products as two 16-byte float32 vectors (16-byte accesses on
every arch: TileLang's 32-byte vectors need 32-byte alignment on sm_100+, see
docs/ADDING_AN_OP.md). The grid is ``ceil(H / (THREADS * VEC)) x GW``. GW and H are run-time
sizes (one generic variant); a run-time branch takes the vector path when ``H % VEC == 0``
(every row then starts 16-byte aligned) and element accesses otherwise.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..spec import SPLIT_AT_SM100, KernelSpec

DTYPES = ("bfloat16",)
THREADS = 128
VEC = 8  # bf16 elements per 16-byte vector
HALF = VEC // 2  # float32 elements per 16-byte vector
COLS = THREADS * VEC  # columns per block


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(w_h[GW, H], w_k[GW, H], w[GW, H] fp32)``. ``arch`` does not change
    the code."""
    if dtype not in DTYPES:
        raise ValueError(f"engram_fused_weight: unsupported dtype {dtype!r}")
    import tilelang.language as T

    GW, H = T.dynamic("GW"), T.dynamic("H")

    @T.prim_func
    def engram_fused_weight(
        w_h: T.Tensor((GW, H), dtype),
        w_k: T.Tensor((GW, H), dtype),
        w: T.Tensor((GW, H), "float32"),
    ):
        with T.Kernel(ceildiv(T, H, COLS), GW, threads=THREADS) as (bc, g):
            col = bc * COLS + T.get_thread_binding() * VEC
            a = T.alloc_local((VEC,), dtype)
            b = T.alloc_local((VEC,), dtype)
            if H % VEC == 0:
                T.assume(H % VEC == 0)  # rows start 16-byte aligned: vector accesses
                if col < H:
                    for e in T.vectorized(VEC):
                        a[e] = w_h[g, col + e]
                    for e in T.vectorized(VEC):
                        b[e] = w_k[g, col + e]
                    for half in T.unroll(2):
                        for e in T.vectorized(HALF):
                            w[g, col + half * HALF + e] = T.cast(
                                a[half * HALF + e], "float32"
                            ) * T.cast(b[half * HALF + e], "float32")
            else:
                for e in T.unroll(VEC):
                    if col + e < H:
                        w[g, col + e] = T.cast(w_h[g, col + e], "float32") * T.cast(
                            w_k[g, col + e], "float32"
                        )

    return engram_fused_weight


def reference(w_h, w_k):
    """torch reference: ``w_h.float() * w_k.float()`` (exact for bf16 weights), any shape;
    TileKernels' fused_weight for ``[hc_mult, H]``."""
    import torch

    return w_h.to(torch.float32) * w_k.to(torch.float32)


SPEC = KernelSpec(
    op="engram_fused_weight",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({},),
    reference=reference,
    lowering_classes=SPLIT_AT_SM100,
    lowering_reason="elementwise fp32 math: packed float2 pairs from sm_100",
    doc="Engram fused gate weight: float32(w_h) * float32(w_k), [GW, H] bf16 -> fp32 "
    "(TileKernels' fused_weight; exact).",
)
