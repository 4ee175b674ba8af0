"""Per-token cast to E5M6 (12-bit codes, eight packed in 12 bytes) with one fp32 scale per row.

TileKernels 1.0.0's ``per_token_cast(x, "e5m6", num_per_channels=N)``
(``tile_kernels/quant/per_token_cast_to_e5m6_kernel.py``; its reference
``tile_kernels/torch/cast_e5m6.py`` ``cast_to_e5m6`` is the spec), bit for bit. Per row::

    amax  = max(max |x|, 1e-4)
    scale = amax / 65024                 # round_sf = 0 (65024: the largest E5M6 value)
          | 2^ceil(log2(amax / 65024))   # round_sf = 1 (a runtime scalar)
    inv   = 65024 / amax  |  1 / scale   # the power-of-two inverse, 0 where it underflows
    y     = x * inv                      # fp32, one IEEE multiply per element

An E5M6 code is the top 12 bits of an fp16 (sign, 5 exponent bits, 6 mantissa bits). The code
of ``y`` is computed from its fp32 bits ``b`` as the spec does, in two steps:

1. ``h`` = fp16 bits of ``y`` rounded toward zero (subnormal fp16 for ``2^-24 <= |y| < 2^-14``,
   signed zero below, ``0x7C00`` for anything past the fp16 range, ``0x7FFF`` for NaN);
2. ``code = ((h >> 4) + ((h >> 4 & 1) + (b & 0x1FFFF) > 0x10000)) & 0xFFF``: round half to
   even on the 17 fp32 mantissa bits below the code's 6. For fp16 subnormals those 17 bits are
   not the bits dropped (the spec's choice, kept: it is what the codes are).

|y| <= 65024 up to an ulp for finite x, so step 1's overflow case is never met then. Codes
``c0..c7`` of 8 consecutive elements fill 3 little-endian uint32 words, most significant
first: ``w0 = c0 c1 c2[11:4]``, ``w1 = c2[3:0] c3 c4 c5[11:8]``, ``w2 = c5[7:0] c6 c7``.
The row of N elements is ``3 N / 2`` bytes. Infinite x are served bit for bit too (scale inf,
inv 0); NaN x: unspecified (the block max ignores NaN, torch's propagates it).

Kernel: one CTA of 128 threads per row, two passes. Pass 1: the row's |x| max, 16-byte
vectors per thread, one block all-reduce (a named barrier from sm_80 on: lowering by
generation). Pass 2: each thread turns 8 elements into 3 words and stores them as three
4-byte stores (a row's byte offset ``12 k`` is 4-byte aligned, not 16): neighbouring threads
write neighbouring 12-byte pieces, so a warp's stores cover 384 contiguous bytes.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..spec import BY_GENERATION, KernelSpec

DTYPES = ("bfloat16", "float32")  # TileKernels' inputs
ITEMSIZE = {"bfloat16": 2, "float32": 4}
E5M6_MAX = 65024.0  # 2^15 * (1 + 63/64)
AMAX_FLOOR = 1e-4
PACK = 8  # elements per 3-word (12-byte) piece: N % 8 == 0
THREADS = 128  # a power of two (block all-reduce)
AMAX_UNROLL = 2  # pass 1: 16-byte vectors per thread per chunk


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(x[M, N], q[M, 3 N / 2] uint8, scale[M, 1] float32, round_sf int32)``.

    ``N % 8 == 0`` (the constraint); ``round_sf`` non-zero: power-of-two scales. ``arch``
    does not change the code.
    """
    if dtype not in DTYPES:
        raise ValueError(f"per_token_cast_e5m6: unsupported dtype {dtype!r}")
    import tilelang.language as T

    vec = 16 // ITEMSIZE[dtype]  # elements per 16-byte vector of x
    chunk = THREADS * vec * AMAX_UNROLL
    M = T.dynamic("M")
    N = T.dynamic("N")
    width = T.int32(vec)  # bound here: through a macro argument it would not stay constant

    @T.prim_func
    def per_token_cast_e5m6(
        x: T.Tensor((M, N), dtype),
        q: T.Tensor((M, N // 8 * 12), "uint8"),
        scale: T.Tensor((M, 1), "float32"),
        round_sf: T.int32,
    ):
        with T.Kernel(M, threads=THREADS) as row:
            T.assume(N % PACK == 0)  # the constraint: rows start 16-byte aligned
            tx = T.get_thread_binding()
            buf = T.alloc_fragment((chunk,), "float32")
            amax = T.alloc_fragment((1,), "float32")
            inv = T.alloc_var("float32")
            xv = T.alloc_local((PACK,), dtype)
            h = T.alloc_local((PACK,), "uint32")
            words = T.alloc_local((3,), "uint32")
            word_bytes = T.view(words, (12,), "uint8")
            # Pass 1: per-thread |x| maxima, then one block all-reduce.
            T.clear(buf)
            for c in T.serial(T.ceildiv(N, chunk)):
                for j in T.Parallel(chunk, coalesced_width=width):
                    if c * chunk + j < N:
                        buf[j] = T.max(buf[j], T.abs(T.cast(x[row, c * chunk + j], "float32")))
            T.reduce_max(buf, amax, dim=0)
            a = T.max(amax[0], AMAX_FLOOR)
            s = T.ieee_fdiv(a, E5M6_MAX)
            e = T.shift_right(T.reinterpret(s, "uint32") - T.uint32(1), T.uint32(23)) + 1
            pow2 = T.reinterpret(T.shift_left(e, T.uint32(23)), "float32")
            # 1 / 2^(e - 127) has biased exponent 254 - e; 0 where that is below 0 (s = inf).
            pow2_inv = T.reinterpret(
                T.shift_left(T.max(T.int32(254) - T.cast(e, "int32"), 0), 23), "float32"
            )
            inv = T.if_then_else(round_sf != 0, pow2_inv, T.ieee_fdiv(T.float32(E5M6_MAX), a))
            if tx == 0:
                scale[row, 0] = T.if_then_else(round_sf != 0, pow2, s)
            # Pass 2: 8 elements per thread per step -> 3 words -> 12 bytes.
            for c in T.serial(T.ceildiv(N // PACK, THREADS)):
                p = c * THREADS + tx
                if p < N // PACK:
                    for i in T.unroll(PACK // vec):
                        for v in T.vectorized(vec):
                            xv[i * vec + v] = x[row, p * PACK + i * vec + v]
                    for v in T.unroll(PACK):
                        bits = T.reinterpret(T.ieee_mul(T.cast(xv[v], "float32"), inv), "uint32")
                        h[v] = _e5m6_code(T, bits)
                    words[0] = (h[0] << 20) | (h[1] << 8) | (h[2] >> 4)
                    words[1] = (h[2] << 28) | (h[3] << 16) | (h[4] << 4) | (h[5] >> 8)
                    words[2] = (h[5] << 24) | (h[6] << 12) | h[7]
                    for k in T.unroll(3):
                        for v in T.vectorized(4):
                            q[row, p * 12 + k * 4 + v] = word_bytes[k * 4 + v]

    return per_token_cast_e5m6


def _e5m6_code(T, b):
    """The 12-bit code (in a uint32) of the fp32 with bits ``b`` (uint32): the module
    docstring's steps 1 and 2, in integer operations only (the same on every arch)."""
    u32 = T.uint32
    exp = T.cast((b >> 23) & u32(0xFF), "int32")
    mant = b & u32(0x7FFFFF)
    sign = (b >> 16) & u32(0x8000)
    normal = T.cast(exp - 112, "uint32") << 10 | (mant >> 13)
    # 2^-24 <= |y| < 2^-14: the implicit one and the mantissa shifted to the fp16 subnormal
    # step; the shift is clamped so the unselected lanes stay defined.
    shift = T.cast(T.min(T.max(126 - exp, 0), 31), "uint32")
    subnormal = (mant | u32(0x800000)) >> shift
    special = T.if_then_else((exp == 255) & (mant != 0), u32(0x7FFF), u32(0x7C00))
    mag = T.if_then_else(
        exp >= 113,
        T.if_then_else(exp <= 142, normal, special),
        T.if_then_else(exp >= 103, subnormal, u32(0)),
    )
    code = (sign | mag) >> 4
    up = T.cast((code & u32(1)) + (b & u32(0x1FFFF)) > u32(0x10000), "uint32")
    return (code + up) & u32(0xFFF)


def reference_codes(y):
    """torch: the 12-bit codes (int64) of a float32 tensor ``y``, as the kernel computes them."""
    import torch

    b = y.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    exp, mant, sign = (b >> 23) & 0xFF, b & 0x7FFFFF, (b >> 16) & 0x8000
    normal = ((exp - 112) << 10) | (mant >> 13)
    subnormal = (mant | 0x800000) >> (126 - exp).clamp(0, 63)
    special = torch.where((exp == 255) & (mant != 0), 0x7FFF, 0x7C00)
    zero = torch.zeros_like(b)
    mag = torch.where(
        exp >= 113,
        torch.where(exp <= 142, normal, special),
        torch.where(exp >= 103, subnormal, zero),
    )
    code = (sign | mag) >> 4
    return (code + ((code & 1) + (b & 0x1FFFF) > 0x10000)) & 0xFFF


def pack_codes(codes):
    """torch: int64 codes ``[M, N]`` -> uint8 ``[M, 3 N / 2]`` (3 little-endian words per 8)."""
    import torch

    m, n = codes.shape
    c = codes.reshape(m, n // PACK, PACK)
    w0 = (c[..., 0] << 20) | (c[..., 1] << 8) | (c[..., 2] >> 4)
    w1 = (c[..., 2] << 28) | (c[..., 3] << 16) | (c[..., 4] << 4) | (c[..., 5] >> 8)
    w2 = (c[..., 5] << 24) | (c[..., 6] << 12) | c[..., 7]
    words = torch.stack([w0, w1, w2], dim=-1) & 0xFFFFFFFF
    shifts = torch.arange(0, 32, 8, device=codes.device)
    return ((words.unsqueeze(-1) >> shifts) & 0xFF).to(torch.uint8).reshape(m, n // PACK * 12)


def reference(x, round_sf: bool = False):
    """torch reference, bit-exact for non-NaN x: ``(q [M, 3N/2] uint8, scale [M, 1] float32)``.

    TileKernels' ``tile_kernels.torch.cast_e5m6.cast_to_e5m6(x, N, round_sf=round_sf)``
    computes the same bytes and scales (tests/test_parity_quant.py)."""
    import torch

    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True).clamp(min=AMAX_FLOOR)
    top = torch.full_like(amax, E5M6_MAX)  # tensor divisors: torch's CUDA scalar division
    s = amax / top  # multiplies by the reciprocal
    if round_sf:
        e = ((s.view(torch.int32) - 1) >> 23) + 1
        s, inv = (e << 23).view(torch.float32), ((254 - e).clamp(min=0) << 23).view(torch.float32)
    else:
        inv = top / amax
    return pack_codes(reference_codes(xf * inv)), s


def _constraints(key, spec) -> dict[str, int]:
    return {"N": PACK}


SPEC = KernelSpec(
    op="per_token_cast_e5m6",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({},),
    reference=reference,
    lowering_classes=BY_GENERATION,
    lowering_reason="block-wide amax: a named barrier from sm_80 on",
    constraints=_constraints,
    doc="q, scale = e5m6(x * RN(65024/amax)) packed 8 codes in 12 bytes, amax/65024 (or its"
    " power-of-two ceiling) per row, as TileKernels' per_token_cast(x, 'e5m6', N).",
)
