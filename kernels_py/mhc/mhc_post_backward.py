"""mHC post-mix, backward: the four gradients of mhc_post (see mhc_post.py).

For ``out[n, :] = post[n] * x + sum_m comb[m, n] * residual[m, :]`` per token (TileKernels'
backward kernel, ``tile_kernels/mhc/post_kernel.py``, computes the same; its kernel serves
R = 4 only)::

    grad_x[h]           = bf16(sum_n post[n] * grad_out[n, h])
    grad_residual[m, h] = bf16(sum_n comb[m, n] * grad_out[n, h])
    grad_post[n]        = sum_h x[h] * grad_out[n, h]                 (float32)
    grad_comb[m, n]     = sum_h residual[m, h] * grad_out[n, h]       (float32)

sums over n in order from 0, in float32.

Memory-bound: per token it reads ``(2R + 1) H`` and writes ``(R + 1) H`` bf16 values, once each.
One block of 128 threads per token walks the row in chunks of 1024 columns (8 per thread). Per
chunk a thread first issues all its loads (R rows of ``grad_out``, x, R rows of ``residual``:
16-byte loads when ``H % 8 == 0``, so ``2R + 1`` of them in flight; element loads otherwise),
then computes its 8 columns of ``grad_x`` and ``grad_residual`` (16-byte stores) and adds to
``R + R * R`` float32 partial dot products it keeps in registers. The mixes are staged once
per token in shared memory (one load each per block, not per thread). At the end a warp
butterfly per value plus one pass through shared memory reduces the partials (columns of a
thread in order, then lanes, then warps 0..3; the same order as the earlier version).

Variants: R = 4 (the models' stream count) is specialised, so a thread holds 20 partials and
4 rows: 126 registers, 4 blocks (16 warps, 9 16-byte loads each in flight) per SM. The generic
variant unrolls to ``MAX_R = 8`` with ``< R`` guards (any R <= 8) and holds 72 partials (208
registers, 2 blocks per SM). The earlier version (one variant: 2-byte loads and stores of
every row, 207 registers) ran at 19 % of copy speed on an H200 at [8192, 4, 7168]; that
shape moves 1.64 GB per launch, about 380 us at copy speed.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..spec import ALL_CUDA_SAME, KernelSpec
from .expand_to_mhc import COLS, THREADS, VEC

MAX_R = 8
WARPS = THREADS // 32
STATIC_R = (4,)
# Blocks per SM ptxas must fit, per static R: R = 4 then takes 126 registers (no spills) instead
# of 150, 16 warps per SM. The generic variant is left alone: at 3 blocks it spills.
MIN_BLOCKS = {4: 4}


def factory(arch: str, dtype: str, R: int | None = None):
    """TileLang prim_func ``(grad_out[M, R, H], x[M, H], residual[M, R, H],
    post_layer_mix[M, R, 1], comb_res_mix[M, R, R], grad_x[M, H], grad_residual[M, R, H],
    grad_post_layer_mix[M, R, 1], grad_comb_res_mix[M, R, R])``; ``R`` fixed when given.
    ``arch`` does not change the code."""
    if dtype != "bfloat16":
        raise ValueError(f"mhc_post_backward: unsupported dtype {dtype!r}")
    error = _spec_error({"dtype": dtype}, {} if R is None else {"R": R})
    if error:
        raise ValueError(error)
    import tilelang.language as T

    M, H = T.dynamic("M"), T.dynamic("H")
    rmax = MAX_R if R is None else R  # rows the loops unroll to; `< R` guards fold when static
    blocks = None if R is None else MIN_BLOCKS.get(R)
    R = T.dynamic("R") if R is None else R
    sums = rmax + rmax * rmax  # grad_post, then grad_comb row by row (also the mixes' layout)

    @T.prim_func
    def mhc_post_backward(
        grad_out: T.Tensor((M, R, H), "bfloat16"),
        x: T.Tensor((M, H), "bfloat16"),
        residual: T.Tensor((M, R, H), "bfloat16"),
        post_layer_mix: T.Tensor((M, R, 1), "float32"),
        comb_res_mix: T.Tensor((M, R, R), "float32"),
        grad_x: T.Tensor((M, H), "bfloat16"),
        grad_residual: T.Tensor((M, R, H), "bfloat16"),
        grad_post_layer_mix: T.Tensor((M, R, 1), "float32"),
        grad_comb_res_mix: T.Tensor((M, R, R), "float32"),
    ):
        with T.Kernel(M, threads=THREADS) as t:
            tx = T.get_thread_binding()
            if blocks:  # a Python value: the generic variant gets no annotation
                T.annotate_min_blocks_per_sm(blocks)
            gb = T.alloc_local((rmax, VEC), "bfloat16")  # the chunk's grad_out rows
            rb = T.alloc_local((rmax, VEC), "bfloat16")  # the chunk's residual rows
            xb = T.alloc_local((VEC,), "bfloat16")
            acc = T.alloc_local((VEC,), "float32")
            o = T.alloc_local((VEC,), "bfloat16")
            o_bits = T.view(o, (4,), "uint32")
            part = T.alloc_local((sums,), "float32")
            mix = T.alloc_shared((sums,), "float32")  # post, then comb row by row
            red = T.alloc_shared((WARPS, sums), "float32")
            if tx < rmax:
                if tx < R:
                    mix[tx] = post_layer_mix[t, tx, 0]
            if tx < rmax * rmax:  # rmax * rmax <= 64 < THREADS: one pass
                if (tx // rmax < R) & (tx % rmax < R):
                    mix[rmax + tx] = comb_res_mix[t, tx // rmax, tx % rmax]
            for k in T.unroll(sums):
                part[k] = T.float32(0)
            T.sync_threads()
            for c in T.serial(T.ceildiv(H, COLS)):
                col = c * COLS + tx * VEC
                # All the chunk's loads first (zeros outside), so they are in flight together.
                if H % VEC == 0:
                    T.assume(H % VEC == 0)  # rows start 16-byte aligned: vector loads
                    for n in T.unroll(rmax):
                        for e in T.vectorized(VEC):
                            gb[n, e] = T.if_then_else(
                                (n < R) & (col < H), grad_out[t, n, col + e], T.bfloat16(0)
                            )
                    for e in T.vectorized(VEC):
                        xb[e] = T.if_then_else(col < H, x[t, col + e], T.bfloat16(0))
                    for m in T.unroll(rmax):
                        for e in T.vectorized(VEC):
                            rb[m, e] = T.if_then_else(
                                (m < R) & (col < H), residual[t, m, col + e], T.bfloat16(0)
                            )
                else:
                    for n in T.unroll(rmax):
                        for e in T.unroll(VEC):
                            gb[n, e] = T.if_then_else(
                                (n < R) & (col + e < H), grad_out[t, n, col + e], T.bfloat16(0)
                            )
                    for e in T.unroll(VEC):
                        xb[e] = T.if_then_else(col + e < H, x[t, col + e], T.bfloat16(0))
                    for m in T.unroll(rmax):
                        for e in T.unroll(VEC):
                            rb[m, e] = T.if_then_else(
                                (m < R) & (col + e < H), residual[t, m, col + e], T.bfloat16(0)
                            )
                # grad_x and grad_post
                for e in T.unroll(VEC):
                    acc[e] = T.float32(0)
                for n in T.unroll(rmax):
                    if n < R:
                        for e in T.unroll(VEC):
                            g = T.cast(gb[n, e], "float32")
                            acc[e] = acc[e] + mix[n] * g
                            part[n] = part[n] + T.cast(xb[e], "float32") * g
                for e in T.unroll(VEC):
                    o[e] = T.cast(acc[e], "bfloat16")
                if H % VEC == 0:
                    if col < H:
                        T.stg128(grad_x[t, col], o_bits.vload([0], "uint32x4"))
                else:
                    for e in T.unroll(VEC):
                        if col + e < H:
                            grad_x[t, col + e] = o[e]
                # grad_residual and grad_comb, one residual row at a time
                for m in T.unroll(rmax):
                    if m < R:
                        for e in T.unroll(VEC):
                            acc[e] = T.float32(0)
                        for n in T.unroll(rmax):
                            if n < R:
                                for e in T.unroll(VEC):
                                    g = T.cast(gb[n, e], "float32")
                                    k = rmax + m * rmax + n
                                    acc[e] = acc[e] + mix[k] * g
                                    part[k] = part[k] + T.cast(rb[m, e], "float32") * g
                        for e in T.unroll(VEC):
                            o[e] = T.cast(acc[e], "bfloat16")
                        if H % VEC == 0:
                            if col < H:
                                T.stg128(grad_residual[t, m, col], o_bits.vload([0], "uint32x4"))
                        else:
                            for e in T.unroll(VEC):
                                if col + e < H:
                                    grad_residual[t, m, col + e] = o[e]
            # Block sums: a butterfly per value, then the warps' sums through shared memory.
            for k in T.unroll(sums):
                for s in T.unroll(5):
                    part[k] = part[k] + T.shfl_xor(part[k], T.shift_left(1, 4 - s))
            if tx % 32 == 0:
                for k in T.unroll(sums):
                    red[tx // 32, k] = part[k]
            T.sync_threads()
            if tx < rmax:
                if tx < R:
                    total = red[0, tx] + red[1, tx] + red[2, tx] + red[3, tx]
                    grad_post_layer_mix[t, tx, 0] = total
            if tx < rmax * rmax:
                m, n = tx // rmax, tx % rmax
                if (m < R) & (n < R):
                    j = rmax + tx
                    total = red[0, j] + red[1, j] + red[2, j] + red[3, j]
                    grad_comb_res_mix[t, m, n] = total

    return mhc_post_backward


def reference(grad_out, x, residual, post_layer_mix, comb_res_mix):
    """torch reference: (grad_x, grad_residual, grad_post_layer_mix, grad_comb_res_mix) as
    documented, float32 math (sums over n in order)."""
    import torch

    g = grad_out.float()
    r = grad_out.shape[-2]
    gx = torch.zeros_like(x, dtype=torch.float32)
    gres = torch.zeros_like(residual, dtype=torch.float32)
    for n in range(r):
        gx = gx + post_layer_mix[..., n, :].float() * g[..., n, :]
        gres = gres + comb_res_mix[..., :, n].float().unsqueeze(-1) * g[..., n, :].unsqueeze(-2)
    gpost = (x.float().unsqueeze(-2) * g).sum(-1, keepdim=True)
    gcomb = torch.einsum("...mh,...nh->...mn", residual.float(), g)
    return gx.to(torch.bfloat16), gres.to(torch.bfloat16), gpost, gcomb


def _spec_error(key, spec) -> str | None:
    """Why a static R cannot be built (the kernel unrolls to MAX_R rows), or None."""
    r = spec.get("R")
    if r is not None and not 1 <= r <= MAX_R:
        return f"mhc_post_backward: R = {r} is out of range; use 1 <= R <= {MAX_R}"
    return None


SPEC = KernelSpec(
    op="mhc_post_backward",
    factory=factory,
    keys=({"dtype": "bfloat16"},),
    specs=({}, *({"R": r} for r in STATIC_R)),
    reference=reference,
    spec_error=_spec_error,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="grads of mhc_post (x, residual bf16; post_layer_mix, comb_res_mix fp32); R <= 8.",
)
