"""Lossless re-quantisation of FP4 E2M1 codes with power-of-two scales to FP8 E4M3 with coarser
power-of-two scales: TileKernels 1.0.0's ``per_block_cast_lossless`` (op
"per_block_cast_lossless").

The input is what ``per_token_cast_fp4`` writes (``x`` uint8 ``[M, N/2]``, element ``2i`` in
the low nibble of byte ``i``) with one scale per ``in_m x in_k`` block (TileKernels'
``x_block_size``; 1 x 32 for its FP4 casts); the output is e4m3 ``[M, N]`` with one scale per
``out_m x out_k`` block (``out_block_size``, e.g. 128 x 128 or 1 x 128), ``out_m`` a multiple of
``in_m`` and ``out_k`` of ``in_k``, both k sizes powers of two. Scales are read and written as
TileKernels' kernel treats them, by their biased exponent only::

    e(s)  = bits(s) >> 23   (float32 s; the mantissa is ignored)  |  s   (a UE8M0 byte)
    E     = max(max e(x_sf) over the input blocks of the output block - 6, 0)   (uint32)
    scale = float32 with bits E << 23  (E = 0: 0.0)                |  the byte E
    q     = e4m3(e2m1(code) * float32 with bits ((e(x_sf) - E + 127) << 23))    (uint32 math)

An input block counts towards ``E`` when its first element lies inside the matrix. The
multiplier is ``2^(e - E)``: within ``[2^-5, 2^6]`` whenever ``e >= E - 5`` (TileKernels'
kernel stops with a device assert otherwise), where every E2M1 value times it is an exact
E4M3 value (0.5 * 2^-5 = 2^-6 is e4m3's smallest normal, 6 * 2^6 = 384 < 448): the cast loses
nothing. Past that bound this kernel does not stop; it writes the same formula's result,
rounded to nearest even and saturated at +-448 (no TileKernels semantics: it traps).

Kernels (two ``T.Kernel`` blocks, run in order): the first gives each output scale a warp
(8 per CTA of 256 threads); its lanes take the ``(out_m/in_m) x (out_k/in_k)`` input scales
in turn, a warp shuffle max gives ``E`` and lane 0 stores the scale. The second casts: a thread
per 8 bytes of codes (16 elements, ``N % 32 == 0`` as TileKernels asks, so 8-byte aligned),
one 8-byte load, the multiplier from the input scale and the stored output scale (one of each
when ``in_k >= 16``, the common 1 x 32 input; per element otherwise), one 16-byte store.
Block sizes are runtime int32 scalars; the k sizes are passed as their log2 (shifts).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..spec import ALL_CUDA_SAME, KernelSpec
from .cast_back_fp4 import _decode as decode_e2m1
from .cast_back_fp4 import decode_values

FP8 = "float8_e4m3fn"
SF_DTYPES = ("float32", "uint8")  # scales: float32, or UE8M0 exponent bytes
THREADS = 256
WARPS = THREADS // 32
UNIT = 16  # elements (8 bytes of codes) per thread in the cast
FP8_MAX = 448.0
HEADROOM = 6  # E = max exponent - 6: the largest e2m1 (6 = 1.5 * 2^2) times 2^6 is 384


def factory(arch: str, sf_in: str, sf_out: str):
    """TileLang prim_func ``(x[M, K] uint8, x_sf[MI, KI], q[M, 2K] e4m3fn, scale[MO, KO],
    in_m, in_k_log2, out_m, out_k_log2: int32)``, x_sf and scale float32 or uint8 (UE8M0) by
    ``sf_in`` / ``sf_out`` (their dtype names); the wrapper checks ``MI = ceil(M / in_m)``,
    ``KI = ceil(2K / in_k)``, ``MO``, ``KO`` likewise and ``K % 16 == 0``. ``arch`` does not
    change the code."""
    if sf_in not in SF_DTYPES or sf_out not in SF_DTYPES:
        raise ValueError(f"per_block_cast_lossless: unsupported key {sf_in!r}, {sf_out!r}")
    import tilelang.language as T

    M, K = T.dynamic("M"), T.dynamic("K")
    MI, KI, MO, KO = T.dynamic("MI"), T.dynamic("KI"), T.dynamic("MO"), T.dynamic("KO")
    wide = _cast_macro(T, sf_in, sf_out, M, K, wide=True)
    narrow = _cast_macro(T, sf_in, sf_out, M, K, wide=False)

    @T.prim_func
    def per_block_cast_lossless(
        x: T.Tensor((M, K), "uint8"),
        x_sf: T.Tensor((MI, KI), sf_in),
        q: T.Tensor((M, 2 * K), FP8),
        scale: T.Tensor((MO, KO), sf_out),
        in_m: T.int32,
        in_k_log2: T.int32,
        out_m: T.int32,
        out_k_log2: T.int32,
    ):
        with T.Kernel(T.ceildiv(MO * KO, WARPS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            per_m = out_m // in_m  # input scale rows per output scale
            per_k_log2 = out_k_log2 - in_k_log2
            count = per_m << per_k_log2
            o = bx * WARPS + tx // 32
            om = o // KO
            ok = o % KO
            best = T.alloc_var("int32")
            best = 0
            for i in T.serial(T.ceildiv(count, 32)):
                j = lane + i * 32
                im = om * per_m + (j >> per_k_log2)
                ik = (ok << per_k_log2) + (j & ((1 << per_k_log2) - 1))
                if (j < count) & (im < MI) & (ik < KI):
                    best = T.max(best, T.cast(exponent(T, sf_in, x_sf[im, ik]), "int32"))
            best = T.warp_reduce_max(best)
            if (lane == 0) & (o < MO * KO):
                big = T.cast(T.max(best - HEADROOM, 0), "uint32")
                if sf_out == "float32":
                    scale[om, ok] = T.reinterpret(big << T.uint32(23), "float32")
                else:
                    scale[om, ok] = T.cast(big, "uint8")

        with T.Kernel(T.ceildiv(M * (K // 8), THREADS), threads=THREADS) as bx:
            if in_k_log2 >= 4:
                wide(x, x_sf, q, scale, in_m, in_k_log2, out_m, out_k_log2, bx)
            else:
                narrow(x, x_sf, q, scale, in_m, in_k_log2, out_m, out_k_log2, bx)

    return per_block_cast_lossless


def exponent(T, dtype: str, stored):
    """uint32 biased exponent of a stored scale: float32 bits >> 23 (the sign bit too, as
    TileKernels), or the UE8M0 byte."""
    if dtype == "float32":
        return T.shift_right(T.reinterpret(stored, "uint32"), T.uint32(23))
    return T.cast(stored, "uint32")


def _cast_macro(T, sf_in: str, sf_out: str, M, K, wide: bool):
    """Macro casting the 16 elements of unit ``bx * THREADS + thread``: ``wide`` (in_k >= 16,
    so out_k too) reads one input and one output scale for them, else one per element."""

    @T.macro
    def multiplier(x_sf, scale, row, c, in_m, in_k_log2, out_m, out_k_log2):
        e_in = exponent(T, sf_in, x_sf[row // in_m, c >> in_k_log2])
        e_out = exponent(T, sf_out, scale[row // out_m, c >> out_k_log2])
        return T.reinterpret(T.shift_left(e_in - e_out + T.uint32(127), T.uint32(23)), "float32")

    @T.macro
    def cast_unit(x, x_sf, q, scale, in_m, in_k_log2, out_m, out_k_log2, bx):
        tx = T.get_thread_binding()
        w = T.alloc_local((2,), "uint32")
        mult = T.alloc_local((UNIT,), "float32")
        y = T.alloc_local((UNIT,), "float32")
        q8 = T.alloc_local((UNIT,), FP8)
        units_per_row = K // 8
        u = bx * THREADS + tx
        row = u // units_per_row
        col = (u % units_per_row) * UNIT
        xw = T.Tensor((M * (K // 4),), "uint32", x.data)
        if u < M * units_per_row:
            for v in T.vectorized(2):
                w[v] = xw[u * 2 + v]
            if wide:  # one input and one output scale for the unit
                mult[0] = multiplier(x_sf, scale, row, col, in_m, in_k_log2, out_m, out_k_log2)
                for k in T.unroll(1, UNIT):
                    mult[k] = mult[0]
            else:
                for k in T.unroll(UNIT):
                    args = (row, col + k, in_m, in_k_log2, out_m, out_k_log2)
                    mult[k] = multiplier(x_sf, scale, *args)
            for k in T.unroll(UNIT):
                y[k] = T.ieee_mul(decode_e2m1(T, w[k // 8], k % 8), mult[k])
            # fp32 -> e4m3 in pairs (__nv_cvt_float2_to_fp8x2, RN, satfinite), as the casts.
            for k in T.vectorized(UNIT):
                q8[k] = y[k]
            for k in T.vectorized(UNIT):
                q[row, col + k] = q8[k]

    return cast_unit


def _exponents(sf):
    """int64 biased exponents of a float32 (bits >> 23, sign bit included) or uint8 scale."""
    import torch

    if sf.dtype == torch.uint8:
        return sf.long()
    return (sf.contiguous().view(torch.int32).long() & 0xFFFFFFFF) >> 23


def _float_of_bits(bits):
    """float32 of int64 values holding uint32 bit patterns."""
    import torch

    return (bits - ((bits >> 31) << 32)).to(torch.int32).view(torch.float32)


def reference(x, x_sf, x_block_size, out_block_size, sf_out: str = "fp32"):
    """torch reference (integer exponent math, then an exact float64 product), bit-exact:
    ``(q [M, N] e4m3fn, scale [ceil(M/out_m), ceil(N/out_k)])``, scale float32 (``sf_out=
    "fp32"``) or uint8 exponents (``"ue8m0"``). ``x`` uint8 ``[M, N/2]`` packed e2m1, ``x_sf``
    float32 or uint8 ``[ceil(M/in_m), ceil(N/in_k)]``."""
    import torch
    import torch.nn.functional as F

    (im, ik), (om, ok) = x_block_size, out_block_size
    m, n = x.shape[0], 2 * x.shape[1]
    mo, ko = -(-m // om), -(-n // ok)
    e_in = _exponents(x_sf)
    pm, pk = om // im, ok // ik
    # Input scales outside [ceil(M/in_m), ceil(N/in_k)] (padding of the last output block) are 0.
    padded = F.pad(e_in, (0, ko * pk - e_in.shape[1], 0, mo * pm - e_in.shape[0]))
    best = padded.view(mo, pm, ko, pk).amax(dim=(1, 3))
    big = (best - HEADROOM).clamp(min=0)
    if sf_out == "fp32":
        scale = _float_of_bits((big << 23) & 0xFFFFFFFF)
    else:
        scale = big.to(torch.uint8)
    e_rows = e_in.repeat_interleave(im, 0)[:m].repeat_interleave(ik, 1)[:, :n]
    big_rows = big.repeat_interleave(om, 0)[:m].repeat_interleave(ok, 1)[:, :n]
    mult = _float_of_bits(((e_rows - big_rows + 127) << 23) & 0xFFFFFFFF).double()
    # float64 product, then float32 (exact: the kernel's float32 product rounds the same)
    q = (decode_values(x) * mult).float().clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


def _constraints(key, spec) -> dict[str, int]:
    return {"K": 16}  # N % 32 == 0 (TileKernels' requirement; 8-byte aligned units)


SPEC = KernelSpec(
    op="per_block_cast_lossless",
    factory=factory,
    keys=tuple({"sf_in": a, "sf_out": b} for a in SF_DTYPES for b in SF_DTYPES),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="warp shuffles only, no block-wide reduction, PDL or arch choice",
    constraints=_constraints,
    doc="e2m1 codes with power-of-two block scales re-cast losslessly to e4m3 with coarser"
    " power-of-two block scales (max exponent - 6), as TileKernels' per_block_cast_lossless.",
)
