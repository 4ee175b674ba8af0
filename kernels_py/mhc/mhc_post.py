"""mHC post-mix, forward: the new residual streams from a sublayer's output.

TileKernels' ``mhc_post`` (`tile-kernels` 1.0.0: reference ``tile_kernels.torch.mhc.mhc_post_ref``,
kernel ``tile_kernels/mhc/post_kernel.py``)::

    out[t, n, :] = post_layer_mix[t, n] * x[t, :] + sum_m comb_res_mix[t, m, n] * residual[t, m, :]

with ``x[T, H]`` bf16 (the sublayer's output), ``residual[T, R, H]`` bf16, ``post_layer_mix[T, R,
1]`` and ``comb_res_mix[T, R, R]`` float32, ``out[T, R, H]`` bf16: float32 math, starting from
the ``post * x`` term and adding ``m = 0 .. R - 1`` in order (as TileKernels' kernel), rounded
once to bf16.

A block of 128 threads owns one token x 1024 columns (8 per thread: 16-byte loads and stores
when ``H % 8 == 0``, element accesses otherwise), written per thread. For each output stream
``n`` a thread adds the R residual vectors with their mixes. Memory-bound: it reads
``(R + 1) H`` and writes ``R H`` bf16 values per token, once each.

Variants: R = 4 (the models' stream count) unrolls both stream loops, so the compiler loads
each residual vector and mix once, x and the 4 rows as 5 16-byte loads in flight together (80
registers). The generic variant (R, H runtime) loops over the streams serially and re-reads
the residual vectors from L1 per output stream: one load in flight per iteration, 76 % of copy
speed on an H200 at R = 4.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .expand_to_mhc import COLS, THREADS, VEC

STATIC_R = (4,)  # the models' stream count
MAX_STATIC_R = 8  # unrolled R * R mixes and R rows per thread stay in registers up to here


def factory(arch: str, dtype: str, R: int | None = None):
    """TileLang prim_func ``(x[M, H], residual[M, R, H], post_layer_mix[M, R, 1],
    comb_res_mix[M, R, R], out[M, R, H])``; ``R`` fixed when given. ``arch`` does not change
    the code."""
    if dtype != "bfloat16":
        raise ValueError(f"mhc_post: unsupported dtype {dtype!r}")
    error = _spec_error({"dtype": dtype}, {} if R is None else {"R": R})
    if error:
        raise ValueError(error)
    import tilelang.language as T

    M, H = T.dynamic("M"), T.dynamic("H")
    # A static R unrolls the stream loops: the compiler then loads each residual vector once,
    # all R of them (and x) in flight together, instead of one load per serial iteration.
    rows = T.serial if R is None else T.unroll
    R = T.dynamic("R") if R is None else R

    @T.prim_func
    def mhc_post(
        x: T.Tensor((M, H), "bfloat16"),
        residual: T.Tensor((M, R, H), "bfloat16"),
        post_layer_mix: T.Tensor((M, R, 1), "float32"),
        comb_res_mix: T.Tensor((M, R, R), "float32"),
        out: T.Tensor((M, R, H), "bfloat16"),
    ):
        with T.Kernel(M, ceildiv(T, H, COLS), threads=THREADS) as (t, bc):
            tx = T.get_thread_binding()
            col = bc * COLS + tx * VEC
            xv = T.alloc_local((VEC,), "bfloat16")
            rv = T.alloc_local((VEC,), "bfloat16")
            acc = T.alloc_local((VEC,), "float32")
            o = T.alloc_local((VEC,), "bfloat16")
            o_bits = T.view(o, (4,), "uint32")
            if H % VEC == 0:
                T.assume(H % VEC == 0)  # rows start 16-byte aligned: vector accesses
                if col < H:  # the whole vector exists
                    for e in T.vectorized(VEC):
                        xv[e] = x[t, col + e]
                    for n in rows(R):
                        for e in T.unroll(VEC):
                            acc[e] = post_layer_mix[t, n, 0] * T.cast(xv[e], "float32")
                        for m in rows(R):
                            for e in T.vectorized(VEC):
                                rv[e] = residual[t, m, col + e]
                            for e in T.unroll(VEC):
                                acc[e] = acc[e] + comb_res_mix[t, m, n] * T.cast(rv[e], "float32")
                        for e in T.unroll(VEC):
                            o[e] = T.cast(acc[e], "bfloat16")
                        T.stg128(out[t, n, col], o_bits.vload([0], "uint32x4"))
            else:
                for n in rows(R):
                    for e in T.unroll(VEC):
                        if col + e < H:
                            acc[e] = post_layer_mix[t, n, 0] * T.cast(x[t, col + e], "float32")
                            for m in rows(R):
                                acc[e] = acc[e] + comb_res_mix[t, m, n] * T.cast(
                                    residual[t, m, col + e], "float32"
                                )
                            out[t, n, col + e] = T.cast(acc[e], "bfloat16")

    return mhc_post


def reference(x, residual, post_layer_mix, comb_res_mix):
    """torch reference: the documented sums in float32 (m order), rounded to bf16
    (differentiable)."""
    import torch

    acc = post_layer_mix.float() * x.float().unsqueeze(-2)
    for m in range(residual.shape[-2]):
        acc = (
            acc
            + comb_res_mix[..., m, :].float().unsqueeze(-1)
            * residual[..., m, :].float()[..., None, :]
        )
    return acc.to(torch.bfloat16)


def _spec_error(key, spec) -> str | None:
    """Why a static R cannot be built, or None."""
    r = spec.get("R")
    if r is not None and not 1 <= r <= MAX_STATIC_R:
        return f"mhc_post: static R = {r} is out of range; use 1 <= R <= {MAX_STATIC_R}"
    return None


SPEC = KernelSpec(
    op="mhc_post",
    factory=factory,
    keys=({"dtype": "bfloat16"},),
    specs=({}, *({"R": r} for r in STATIC_R)),
    reference=reference,
    spec_error=_spec_error,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="mHC post-mix: out[n] = post[n] * x + sum_m comb[m, n] * residual[m]; [T, R, H] bf16.",
)
