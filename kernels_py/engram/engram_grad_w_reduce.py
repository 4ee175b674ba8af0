"""Engram gate's weight gradients from per-block partial sums, accumulated into fp32 gradients.

TileKernels' ``grad_w_reduce`` (`tile-kernels` 1.0.0: ``tile_kernels.engram.grad_w_reduce``,
run by ``tile_kernels.modeling.engram.EngramGateFn``'s backward on the ``grad_w_partial`` its
``engram_gate_bwd`` returns). Its backward kernel leaves, per persistent block ``p``, a float32
partial ``partial[p, g, c]`` of ``sum over rows of alpha * h * k`` (the gradient of the fused
weight ``w_h * w_k``); this op sums them over the blocks and applies the product rule,
adding into the float32 gradients (ZeRO-style ``main_grad`` accumulation)::

    s[g, c]        = partial[0, g, c] + partial[1, g, c] + ... + partial[P - 1, g, c]
    grad_w_h[g, c] = acc_h[g, c] + s[g, c] * float32(w_k[g, c])
    grad_w_k[g, c] = acc_k[g, c] + s[g, c] * float32(w_h[g, c])

``s`` is summed in float32 from 0, block by block in order ``p = 0, 1, ...`` (TileKernels'
kernel: the same order; the result does not depend on the launch). TileKernels updates
``acc_*`` in place; here they are inputs and ``grad_w_*`` outputs (the compat layer writes
them back). The last step is ``acc + s * w`` as one expression, which NVRTC contracts to a
fused multiply-add as it does TileKernels' ``+=`` (its test's bound: calc_diff < 1e-10 against
``acc + partial.sum(0) * w``).

Memory-bound: one read of ``partial`` (``P * GW * H`` float32; P is a few blocks per SM).
Each thread owns ``VEC`` = 4 columns of one weight row (16-byte float32 vectors) and walks
the P partial rows ``UNROLL`` at a time (their loads in flight together, their adds in
order); a block of ``THREADS`` threads covers ``THREADS * VEC`` columns, the grid is
``ceil(H / (THREADS * VEC)) x GW`` (small blocks: at H = 7168, GW = 4 there are 112 blocks
for 132 SMs, twice TileKernels' 56 of 512 columns). The kernel has few threads (one per 4
columns), so its loads in flight make its speed: 32 rows of 16 bytes per thread, as many
bytes as TileKernels' 33-row shared-memory stages (not yet measured on a GPU; ``UNROLL`` and
``THREADS`` are the constants to tune). P, GW and H are run-time sizes (one
generic variant); ``H % 4 == 0`` takes 16-byte accesses, other H element accesses.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..spec import SPLIT_AT_SM100, KernelSpec

DTYPES = ("bfloat16",)
THREADS = 64
VEC = 4  # float32 elements per 16-byte vector
COLS = THREADS * VEC  # columns per block
UNROLL = 32  # partial rows loaded before they are added: 512 bytes per thread in flight


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(grad_w_partial[P, GW, H] fp32, w_h, w_k [GW, H], acc_h, acc_k [GW, H]
    fp32, grad_w_h, grad_w_k [GW, H] fp32)``. ``arch`` does not change the code."""
    if dtype not in DTYPES:
        raise ValueError(f"engram_grad_w_reduce: unsupported dtype {dtype!r}")
    import tilelang.language as T

    P, GW, H = T.dynamic("P"), T.dynamic("GW"), T.dynamic("H")

    def f32(x):
        return T.cast(x, "float32")

    @T.prim_func
    def engram_grad_w_reduce(
        grad_w_partial: T.Tensor((P, GW, H), "float32"),
        w_h: T.Tensor((GW, H), dtype),
        w_k: T.Tensor((GW, H), dtype),
        acc_h: T.Tensor((GW, H), "float32"),
        acc_k: T.Tensor((GW, H), "float32"),
        grad_w_h: T.Tensor((GW, H), "float32"),
        grad_w_k: T.Tensor((GW, H), "float32"),
    ):
        with T.Kernel(ceildiv(T, H, COLS), GW, threads=THREADS) as (bc, g):
            col = bc * COLS + T.get_thread_binding() * VEC
            s = T.alloc_local((VEC,), "float32")
            buf = T.alloc_local((UNROLL, VEC), "float32")
            for e in T.unroll(VEC):
                s[e] = T.float32(0)
            if H % VEC == 0:
                T.assume(H % VEC == 0)  # rows start 16-byte aligned: vector accesses
                if col < H:
                    for i in T.serial(T.ceildiv(P, UNROLL)):
                        for u in T.unroll(UNROLL):
                            # rows past P add +0.0, which changes no sum (s starts at +0.0)
                            if i * UNROLL + u < P:
                                for e in T.vectorized(VEC):
                                    buf[u, e] = grad_w_partial[i * UNROLL + u, g, col + e]
                            else:
                                for e in T.vectorized(VEC):
                                    buf[u, e] = T.float32(0)
                        for u in T.unroll(UNROLL):
                            for e in T.unroll(VEC):
                                s[e] = s[e] + buf[u, e]
                    for e in T.vectorized(VEC):
                        grad_w_h[g, col + e] = acc_h[g, col + e] + s[e] * f32(w_k[g, col + e])
                    for e in T.vectorized(VEC):
                        grad_w_k[g, col + e] = acc_k[g, col + e] + s[e] * f32(w_h[g, col + e])
            else:
                for e in T.unroll(VEC):
                    if col + e < H:
                        for p in T.serial(P):
                            s[e] = s[e] + grad_w_partial[p, g, col + e]
                        grad_w_h[g, col + e] = acc_h[g, col + e] + s[e] * f32(w_k[g, col + e])
                        grad_w_k[g, col + e] = acc_k[g, col + e] + s[e] * f32(w_h[g, col + e])

    return engram_grad_w_reduce


def reference(partial, w_h, w_k, acc_h, acc_k):
    """torch reference ``(grad_w_h, grad_w_k)`` float32: ``partial`` ``[P, *W]`` summed over
    its first dim in order from 0 in float32 (bit-exact with the kernel's sum), then ``acc_h +
    s * w_k`` and ``acc_k + s * w_h`` rounded once, as the kernel's fused multiply-add (the
    product is exact in float64; the float64 sum rounded to float32 is the fused result but
    for a double-rounding tie, far rarer than one in 10**6 elements). Weights and
    accumulators have shape ``W``. TileKernels' test bound is ``calc_diff < 1e-10``."""
    import torch

    s = torch.zeros(partial.shape[1:], dtype=torch.float32, device=partial.device)
    for p in range(partial.shape[0]):
        s = s + partial[p].to(torch.float32)
    d = s.to(torch.float64)

    def fma(acc, w):
        return (acc.to(torch.float64) + d * w.to(torch.float64)).to(torch.float32)

    return fma(acc_h, w_k), fma(acc_k, w_h)


SPEC = KernelSpec(
    op="engram_grad_w_reduce",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({},),
    reference=reference,
    lowering_classes=SPLIT_AT_SM100,
    lowering_reason="per-thread sums; the fused multiply-add packed in float2 pairs from sm_100",
    doc="Engram gate weight gradients: partial[P, GW, H] fp32 summed over P in order, "
    "grad_w_h = acc_h + s * w_k, grad_w_k = acc_k + s * w_h (TileKernels' grad_w_reduce).",
)
