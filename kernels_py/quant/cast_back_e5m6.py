"""Dequantise packed E5M6 codes with fp32 scales: ``x = fp16(code << 4) * scale`` (op
"cast_back_e5m6").

TileKernels 1.0.0's ``cast_back(x, fmt, x_block_size, x_special_fmt="e5m6")``
(``tile_kernels/quant/cast_back_e5m6_kernel.py``; its reference
``tile_kernels/torch/cast_e5m6.py`` ``cast_back_from_e5m6`` is the spec), bit for bit, for
row-wise scales: the inverse of `per_token_cast_e5m6`. A row of ``N`` values is ``K = 3 N / 2``
bytes: every 12 bytes are 3 little-endian uint32 words holding 8 codes, most significant
first (``w0 = c0 c1 c2[11:4]``, ``w1 = c2[3:0] c3 c4 c5[11:8]``, ``w2 = c5[7:0] c6 c7``). A
code is the top 12 bits of an fp16; its value is that fp16 widened to fp32 (exact), times the
scale of its row and column group (one IEEE fp32 multiply), rounded once to the output dtype
(bf16: nearest even; fp32: as is).

Scales: ``[M, G]`` float32, ``G`` groups of ``N / G`` columns per row, ``N / G`` a multiple of
8 (``G = 1``: one scale per row, what `per_token_cast_e5m6` writes); a group's 8-value pieces
share one scale.

Kernel: ``(M, ceil(N / 8 / 128))`` CTAs of 128 threads; a thread owns one 8-value piece of a
row: three 4-byte loads (a warp reads 384 contiguous bytes), the decode, 8 multiplies and one
(bf16) or two (fp32) explicit 16-byte stores (``st.global.v4``, as cast_back_fp8). Rows are
``12 P`` bytes in and ``16 P`` / ``32 P`` bytes out (``P = N / 8``), so every piece is 4-byte
aligned in q and 16-byte aligned in x.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec

OUT_DTYPES = ("bfloat16", "float32")
OUT_ITEMSIZE = {"bfloat16": 2, "float32": 4}
PACK = 8  # values per 12-byte piece
PIECE_BYTES = 12
THREADS = 128


def factory(arch: str, out: str):
    """TileLang prim_func ``(q[M, K] uint8, scale[M, G] float32, x[M, K / 12 * 8] out)``.

    ``K % 12 == 0`` (the constraint) and ``(K / 12) % G == 0`` (the wrapper checks it); ``arch``
    does not change the code.
    """
    if out not in OUT_DTYPES:
        raise ValueError(f"cast_back_e5m6: unsupported out dtype {out!r}")
    import tilelang.language as T

    vec = 16 // OUT_ITEMSIZE[out]  # output values per 16-byte store
    M = T.dynamic("M")
    K = T.dynamic("K")
    G = T.dynamic("G")
    fp16_bits = _fp16_bits_macro(T)

    @T.prim_func
    def cast_back_e5m6(
        q: T.Tensor((M, K), "uint8"),
        scale: T.Tensor((M, G), "float32"),
        x: T.Tensor((M, K // PIECE_BYTES * PACK), out),
    ):
        pieces = T.truncdiv(K, PIECE_BYTES)  # K >= 0: a plain division
        with T.Kernel(M, ceildiv(T, pieces, THREADS), threads=THREADS) as (row, bc):
            T.assume(K % PIECE_BYTES == 0)  # the constraint: pieces 4-byte aligned
            tx = T.get_thread_binding()
            words = T.alloc_local((3,), "uint32")
            word_bytes = T.view(words, (PIECE_BYTES,), "uint8")
            h = T.alloc_local((PACK,), "uint32")
            xf = T.alloc_local((PACK,), "float32")
            xo = T.alloc_local((vec,), out)  # one 16-byte output vector
            xo_bits = T.view(xo, (4,), "uint32")
            p = bc * THREADS + tx
            if p < pieces:
                # the piece's scale column; the wrapper checks pieces % G == 0, G > 0
                grp = T.alloc_var("int32", init=T.truncdiv(p, T.truncdiv(pieces, G)))
                T.assume((0 <= grp) & (grp < G))
                s = T.alloc_var("float32", init=scale[row, grp])
                for k in T.unroll(3):
                    for v in T.vectorized(4):
                        word_bytes[k * 4 + v] = q[row, p * PIECE_BYTES + k * 4 + v]
                fp16_bits(words, h)
                for v in T.unroll(PACK):
                    half = T.reinterpret(T.cast(h[v], "uint16"), "float16")
                    xf[v] = T.ieee_mul(T.cast(half, "float32"), s)  # __fmul_rn: not contracted
                for c in T.unroll(PACK // vec):
                    for v in T.vectorized(vec):
                        xo[v] = T.cast(xf[c * vec + v], out)
                    T.stg128(x[row, p * PACK + c * vec], xo_bits.vload([0], "uint32x4"))

    return cast_back_e5m6


def _fp16_bits_macro(T):
    """Macro ``(w, h)``: the fp16 bits (code << 4) of the 8 codes in words ``w[0..2]`` into
    ``h[0..7]``."""
    mask = T.uint32(0xFFF0)

    @T.macro
    def fp16_bits(w, h):
        h[0] = (w[0] >> 16) & mask
        h[1] = (w[0] >> 4) & mask
        h[2] = ((w[0] << 8) | (w[1] >> 24)) & mask
        h[3] = (w[1] >> 12) & mask
        h[4] = w[1] & mask
        h[5] = ((w[1] << 12) | (w[2] >> 20)) & mask
        h[6] = (w[2] >> 8) & mask
        h[7] = (w[2] << 4) & mask

    return fp16_bits


def unpack_codes(q):
    """torch: uint8 ``[M, K]`` -> the int64 codes ``[M, K / 12 * 8]`` (inverse of
    ``per_token_cast_e5m6.pack_codes``)."""
    import torch

    m, k = q.shape
    b = q.reshape(m, k // PIECE_BYTES, 3, 4).to(torch.int64)
    w = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)
    w0, w1, w2 = w.unbind(-1)
    codes = (w0 >> 20, w0 >> 8, (w0 << 4) | (w1 >> 28), w1 >> 16, w1 >> 4)
    codes += ((w1 << 8) | (w2 >> 24), w2 >> 12, w2)
    return (torch.stack(codes, dim=-1) & 0xFFF).reshape(m, k // PIECE_BYTES * PACK)


def decode(q):
    """torch: the float32 values ``[M, N]`` of packed codes ``q`` (before the scale), exact."""
    import torch

    bits = unpack_codes(q) << 4  # fp16 bits, as an unsigned 16-bit value
    signed = torch.where(bits >= 0x8000, bits - 0x10000, bits).to(torch.int16)
    return signed.view(torch.float16).float()


def reference(q, scale, out_dtype=None):
    """torch reference, bit-exact: ``(decode(q) * scale broadcast).to(out_dtype)`` (bf16
    default); `scale` ``[M, G]`` float32, groups of ``N / G`` columns.

    TileKernels' ``tile_kernels.torch.cast_e5m6.cast_back_from_e5m6((q, scale), fmt,
    (1, N // G))`` computes the same values (tests/test_kernels_cpu_cast_back_e5m6.py)."""
    import torch

    v = decode(q)
    s = scale.float().repeat_interleave(v.shape[1] // max(scale.shape[1], 1), dim=1)
    return (v * s).to(torch.bfloat16 if out_dtype is None else out_dtype)


def _constraints(key, spec) -> dict[str, int]:
    return {"K": PIECE_BYTES}


SPEC = KernelSpec(
    op="cast_back_e5m6",
    factory=factory,
    keys=tuple({"out": o} for o in OUT_DTYPES),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    constraints=_constraints,
    doc="x = fp16(code << 4) * scale (packed E5M6 -> bf16/fp32), per-row or per-group scales,"
    " as TileKernels' cast_back(x, fmt, (1, n), x_special_fmt='e5m6').",
)
