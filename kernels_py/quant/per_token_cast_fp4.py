"""Per-token-group cast to FP4 E2M1 (OCP MX / NVFP4 style) with UE8M0 or E4M3 group scales.

Format. E2M1 has a sign bit and 3 magnitude bits; codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6 and
bit 3 is the sign (0x8 is -0). Two codes per byte: element ``2i`` in the low nibble, ``2i+1`` in
the high nibble of byte ``i`` (the MX/NVFP4 convention: ``q[:, i] = c[2i] | c[2i+1] << 4``).

Math, for each group of ``g`` (16 or 32) consecutive elements of a row, with ``amax`` the
largest ``|x|`` of the group (exact, in float32):

* ``ue8m0``: ``e = max(1, 127 + ceil(log2(amax / 6)))`` (all-zero groups: ``e = 1``, 2^-126),
  stored as a uint8; ``scale = 2^(e - 127)`` is the smallest power of two with
  ``amax / scale <= 6``. This is TileKernels 1.0.0's ``cast(x, "e2m1", (1, g), round_sf=True)``
  byte for byte (codes and scale exponents; tests/test_parity_quant.py): it clamps amax to at
  least ``6 * 2^-126`` and rounds ``amax / 6`` up to a power of two. The exponent comes from
  the bits of ``amax``, no logarithm: ``e = ((bits + 0x3FFFFF) >> 23) - 2``. ``v = |x| / scale``
  is then exact.
* ``e4m3``: ``scale`` is the smallest positive float8_e4m3fn value with ``6 * scale >= amax``
  (exact comparison; all-zero groups get the smallest one, 2^-9), or 448 if ``amax > 2688``
  (those groups saturate). ``v = |x| / scale`` rounded once to float32 (IEEE division).
* ``q = sign(x) | e2m1(v)``: ``v`` rounded to nearest E2M1 magnitude, ties to the even code,
  saturating at 6: the thresholds are ``0.25 < v``, ``0.75 <= v``, ``1.25 < v``, ``1.75 <= v``,
  ``2.5 < v``, ``3.5 <= v``, ``5 < v`` (code = how many hold). The sign bit is the sign bit of
  ``x``, so negative values that round to zero give 0x8 (-0), as hardware conversions do.
  NaN inputs give unspecified (in-bounds) results.

``reference`` computes exactly this in torch; the kernel reproduces it bit for bit.

Kernel (memory-bound, 2.5 bytes moved per bf16 element). The [M, N] problem is flat: groups
never straddle rows (``N % g == 0``), so element ``f`` of the flat tensor belongs to group
``f // g`` and its code to byte ``f // 2``; row length plays no role and one generic kernel
serves every N (a variant specialised on N would compile to the same instructions).

* A thread handles units of 32 input bytes (one DRAM sector: 16 bf16/fp16 or 8 fp32 elements),
  read as two 16-byte loads; ``UNROLL`` units per thread are loaded before any is processed.
  A group is one thread (16-bit g16) or 2/4 neighbouring lanes (one or two ``shfl_xor``).
* The rounding uses no compare-and-select chain. With ``h = 1/(2 scale)`` the three pieces
  ``u1 = sat(|x| h)``, ``u2 = sat(|x| h - 1)``, ``u3 = sat(|x| h - 2)`` (``sat`` clamps to
  [0, 1]) are exact, and ``t = C + 4 u1 + 2 u2 + u3`` with ``C = 1.5 * 2^23`` evaluated as
  three fused multiply-adds rounds each piece to an integer with ties to even (the float32
  spacing at ``C`` is 1, and the running sum is even wherever a later piece can tie), so the
  low bits of ``t`` are the E2M1 code: six FP32 ops per element, all on the FMA pipes. The code
  of the odd element seeds the even one's chain (``C + 16 c_odd``), so ``t`` holds the whole
  output byte, and three byte permutes build a word of eight codes.
* Signs are gathered from the high bytes of the 16-bit input words with four byte permutes
  per eight elements; q is written as 8 bytes per thread (4 for fp32 inputs).
* ``e4m3``: the quotient is correctly rounded without a division per element: per group,
  ``1/(2s)`` as a pair ``r_hi + r_lo`` (approximate reciprocal, exact FMA residual); per
  element ``v/2 = fma(|x|, r_hi, |x| r_lo)``, within 2^-46 of the quotient, which is either a
  float32 or at least 2^-29 (relatively) from every rounding midpoint (24-bit over 4-bit
  significands), so the one rounding is the IEEE division's. Two more FP32 ops per element.

The kernels assume 16-byte aligned base pointers (the Python layer checks them).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..spec import ALL_CUDA_SAME, KernelSpec

DTYPES = ("bfloat16", "float16", "float32")
GROUPS = {"g16": 16, "g32": 32}
SCALES = ("ue8m0", "e4m3")
SCALE_DTYPE = {"ue8m0": "uint8", "e4m3": "float8_e4m3fn"}
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}

THREADS = 128
UNROLL = 2  # units (32 input bytes) per thread, all loaded before the first is processed
# Blocks per SM the register budget must allow (__launch_bounds__): left alone, nvcc takes ~80
# registers for 16-bit inputs (6 blocks, 24 warps per SM); 8 blocks cap it at 64 without
# spilling and keep 32 warps' loads in flight.
MIN_BLOCKS = 8
UNIT_WORDS = 8  # 32-bit words of input per unit

C = 12582912.0  # 1.5 * 2^23: float32 values in [2^23, 2^24) are spaced 1 apart
C_BITS = 0x4B400000


def factory(arch: str, dtype: str, group: str, scale: str, N: int | None = None):
    """TileLang prim_func ``(x[M, N], q[M, N/2] uint8, scale[M, N/g] uint8|float8_e4m3fn)``.

    The same code serves every CUDA arch (no FP4 conversion instruction is used: sm_100a's
    ``cvt.rn.satfinite.e2m1x2`` would save a few FMA-pipe ops in a memory-bound kernel).
    """
    if dtype not in DTYPES or group not in GROUPS or scale not in SCALES:
        raise ValueError(f"per_token_cast_fp4: unsupported key {dtype!r}, {group!r}, {scale!r}")
    g = GROUPS[group]
    if N is not None and N % g:
        raise ValueError(f"per_token_cast_fp4: N={N} is not a multiple of {g}")
    return _kernel(dtype, g, scale, N)


def _kernel(dtype: str, g: int, scale_fmt: str, n: int | None):
    import tilelang.language as T

    per_word = 4 // ITEMSIZE[dtype]  # elements per 32-bit input word
    ept = UNIT_WORDS * per_word  # elements per unit (thread)
    lanes = g // ept  # lanes sharing a group: 1, 2 or 4
    assert g % ept == 0, (g, ept)
    out_words = ept // 8  # 32-bit words of codes per unit
    M = T.dynamic("M")
    N = T.dynamic("N") if n is None else n

    @T.prim_func
    def per_token_cast_fp4(
        x: T.Tensor((M, N), dtype),
        q: T.Tensor((M, N // 2), "uint8"),
        scale: T.Tensor((M, N // g), SCALE_DTYPE[scale_fmt]),
    ):
        with T.Kernel(T.ceildiv(M * N, ept * THREADS * UNROLL), threads=THREADS) as bx:
            # Flat views (M * N < 2^31 is checked by the caller): words of x, words of q,
            # bytes of the scales.
            units = M * N // ept
            xw = T.Tensor((M * N // per_word,), "uint32", x.data)
            qw = T.Tensor((M * N // 8,), "uint32", q.data)
            sb = T.Tensor((M * (N // g),), "uint8", scale.data)
            T.annotate_min_blocks_per_sm(MIN_BLOCKS)
            tx = T.get_thread_binding()
            w = T.alloc_local((UNROLL, UNIT_WORDS), "uint32")
            f = T.alloc_local((ept,), "float32")
            o = T.alloc_local((out_words,), "uint32")
            amax = T.alloc_var("float32")
            for u in T.unroll(UNROLL):  # all loads first: UNROLL x 32 bytes in flight
                unit = (bx * UNROLL + u) * THREADS + tx
                if unit < units:
                    for v in T.vectorized(4):
                        w[u, v] = xw[unit * UNIT_WORDS + v]
                    for v in T.vectorized(4):
                        w[u, 4 + v] = xw[unit * UNIT_WORDS + 4 + v]
                else:
                    for v in T.unroll(UNIT_WORDS):
                        w[u, v] = T.uint32(0)
            for u in T.unroll(UNROLL):
                unit = (bx * UNROLL + u) * THREADS + tx
                for k in list(range(ept)):
                    f[k] = _unpack(T, dtype, w[u, k // per_word], k % per_word)
                amax = T.float32(0)
                for k in list(range(ept)):
                    amax = T.max(amax, T.abs(f[k]))
                for step in [s for s in (1, 2) if s < lanes]:  # the other lanes of the group
                    amax = T.max(amax, T.shfl_xor(amax, step))
                scale_of = _ue8m0_scale if scale_fmt == "ue8m0" else _e4m3_scale
                code, m_hi, m_lo = scale_of(T, amax)
                if (unit < units) & (tx % lanes == 0):
                    sb[unit * ept // g] = T.cast(code, "uint8")
                for j in list(range(out_words)):  # eight codes per word
                    by = [
                        _byte(T, scale_fmt, f[j * 8 + 2 * i], f[j * 8 + 2 * i + 1], m_hi, m_lo)
                        for i in range(4)
                    ]
                    lo, hi = _perm(T, by[0], by[1], 0x40), _perm(T, by[2], by[3], 0x40)
                    words = [w[u, j * (8 // per_word) + i] for i in range(8 // per_word)]
                    o[j] = _perm(T, lo, hi, 0x5410) | _signs(T, dtype, words)
                if unit < units:
                    for j in T.vectorized(out_words):
                        qw[unit * out_words + j] = o[j]

    return per_token_cast_fp4


def _unpack(T, dtype: str, word, half: int):
    """Element `half` of a 32-bit input word, as float32 (exact)."""
    if dtype == "float32":
        return T.reinterpret(word, "float32")
    if dtype == "bfloat16":  # bf16 is the top half of a float32
        bits = word << T.uint32(16) if half == 0 else word & T.uint32(0xFFFF0000)
        return T.reinterpret(bits, "float32")
    bits = word & T.uint32(0xFFFF) if half == 0 else word >> T.uint32(16)
    return T.cast(T.reinterpret(T.cast(bits, "uint16"), "float16"), "float32")


def _ue8m0_scale(T, amax):
    """(e, h, 0), h = 2^(126 - e) = 1 / (2 scale): e is the biased exponent of the smallest
    power-of-two scale >= amax / 6, at least 1 (2^-126: TileKernels' floor).

    ``amax = m 2^E`` with ``m`` in [1, 2): ``ceil(log2(amax / 6)) = E - 2 + (m > 1.5)``, and
    ``m > 1.5`` is a carry out of the mantissa when 0x3FFFFF is added to the bits.
    """
    bits = T.reinterpret(amax, "uint32")
    e = T.max(T.cast((bits + T.uint32(0x3FFFFF)) >> T.uint32(23), "int32") - 2, 1)
    # 2^(127 - e) is a normal float for e in [0, 253]; halve it with a multiply (2^-127 for
    # e = 253 is subnormal, which the exponent field alone cannot express).
    inv = T.reinterpret(T.cast(254 - e, "uint32") << T.uint32(23), "float32")
    return e, inv * T.float32(0.5), T.float32(0)


def _e4m3_value(T, code, factor: float):
    """``factor`` times the float8_e4m3fn value of a positive code (0..126), exactly.

    ``code << 20`` read as float32 is that value times 2^-120 (a subnormal for codes < 8, so
    the kernels must not flush subnormals: tileaot compiles without fast-math).
    """
    return T.reinterpret(T.cast(code, "uint32") << T.uint32(20), "float32") * T.float32(factor)


def _e4m3_scale(T, amax):
    """(code, r_hi, r_lo) for s = the smallest e4m3 value with 6 s >= amax (at most 448), where
    r_hi + r_lo = 1 / (2 s) to about 2^-46.

    ``bits(amax / 6 * 2^-120) >> 20`` is the code at or just below amax / 6 (up to the rounding
    of the multiply); the answer is that code or one of the next two, found by exact compares.
    ``r_hi`` is the hardware's approximate reciprocal (within 2 ulp; any such value works),
    ``1 - r_hi * 2s`` is exact in one FMA, and ``r_lo`` is that residual times ``r_hi``.
    """
    approx = T.reinterpret(amax * T.float32(1.0 / 6.0) * T.float32(2.0**-120), "uint32")
    lo = T.cast(approx >> T.uint32(20), "int32")
    six = 6.0 * 2.0**120
    up = T.cast(_e4m3_value(T, lo, six) < amax, "int32")
    up = up + T.cast(_e4m3_value(T, lo + 1, six) < amax, "int32")
    code = T.min(T.max(lo + up, 1), 127 - 1)
    den = _e4m3_value(T, code, 2.0**121)  # 2 s, in [2^-8, 896]
    r_hi = T.call_extern("float32", "__fdividef", T.float32(1), den)
    residual = T.call_extern("float32", "__fmaf_rn", -r_hi, den, T.float32(1))
    return code, r_hi, T.call_extern("float32", "__fmul_rn", residual, r_hi)


def _code_chain(T, scale_fmt: str, x, m_hi, m_lo, base):
    """``base + e2m1_code(|x| / scale)`` as float32, rounded exactly (module docstring).

    ``|x| / (2 scale)`` is ``|x| * m_hi`` (ue8m0: exact, a power of two) or
    ``|x| * m_hi + |x| * m_lo`` (e4m3: one rounding of a product within 2^-46 of the quotient,
    which is the correctly rounded quotient: a quotient of a 24-bit and a 4-bit significand is
    either a float32 or at least 2^-29 (relatively) away from every midpoint). ``base`` is an
    even integer-valued float in [2^23, 2^24 - 8), so each fused multiply-add rounds its piece
    alone to an integer, ties to the even code.
    """

    def op(name, *args):
        return T.call_extern("float32", name, *args)

    a = T.abs(x)
    if scale_fmt == "ue8m0":  # |x| h is exact, and exact again after subtracting 1 or 2
        u1 = op("__saturatef", op("__fmul_rn", a, m_hi))
        u2 = op("__saturatef", op("__fmaf_rn", a, m_hi, T.float32(-1)))
        u3 = op("__saturatef", op("__fmaf_rn", a, m_hi, T.float32(-2)))
    else:  # the correctly rounded half quotient, then exact subtractions
        half = op("__fmaf_rn", a, m_hi, op("__fmul_rn", a, m_lo))
        u1 = op("__saturatef", half)
        u2 = op("__saturatef", op("__fadd_rn", half, T.float32(-1)))
        u3 = op("__saturatef", op("__fadd_rn", half, T.float32(-2)))
    t = op("__fmaf_rn", u1, T.float32(4), base)
    t = op("__fmaf_rn", u2, T.float32(2), t)
    return op("__fmaf_rn", u3, T.float32(1), t)


def _byte(T, scale_fmt: str, x_even, x_odd, m_hi, m_lo):
    """bits of a float32 equal to ``C + (code(x_odd) << 4 | code(x_even))`` (magnitudes only)."""
    odd = _code_chain(T, scale_fmt, x_odd, m_hi, m_lo, T.float32(C))
    # C + c_odd  ->  C + 16 c_odd, exactly (16 t - 15 C); it seeds the even element's chain.
    base = T.call_extern("float32", "__fmaf_rn", odd, T.float32(16), T.float32(-15 * C))
    return T.reinterpret(_code_chain(T, scale_fmt, x_even, m_hi, m_lo, base), "uint32")


def _perm(T, a, b, selector: int):
    return T.call_extern("uint32", "__byte_perm", a, b, T.uint32(selector))


def _signs(T, dtype: str, words):
    """Sign bits of the eight elements in `words`, at bit 4k+3 for element k."""
    if dtype == "float32":  # one element per word, sign in bit 31
        acc = (words[0] >> T.uint32(28)) & T.uint32(0x8)
        for k in range(1, 8):
            acc = acc | ((words[k] >> T.uint32(28 - 4 * k)) & T.uint32(0x8 << (4 * k)))
        return acc
    # 16-bit elements: element 2i's sign is bit 7 of byte 1 of word i, element 2i+1's bit 7 of
    # byte 3. Gather them bytewise: even elements' bytes in `a`, odd ones' in `b`.
    p = _perm(T, words[0], words[1], 0x7351)  # [e0, e2, e1, e3]
    r = _perm(T, words[2], words[3], 0x7351)  # [e4, e6, e5, e7]
    a = _perm(T, p, r, 0x5410)  # [e0, e2, e4, e6]: bit 7 -> bit 3 of each byte
    b = _perm(T, p, r, 0x7632)  # [e1, e3, e5, e7]: bit 7 stays
    return ((a >> T.uint32(4)) & T.uint32(0x08080808)) | (b & T.uint32(0x80808080))


# ---------------------------------------------------------------------------------------------
# torch reference
# ---------------------------------------------------------------------------------------------


def e4m3_values():
    """The 126 positive finite float8_e4m3fn values, ascending, as float32 (codes 1..126)."""
    import torch

    return torch.arange(1, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()


def e2m1_codes(v):
    """E2M1 magnitude codes (int32, 0..7) of float32 magnitudes ``v >= 0``: nearest, ties even."""
    import torch

    code = torch.zeros(v.shape, dtype=torch.int32, device=v.device)
    for threshold, ties_up in (
        (0.25, 0),
        (0.75, 1),
        (1.25, 0),
        (1.75, 1),
        (2.5, 0),
        (3.5, 1),
        (5.0, 0),
    ):
        code += (v >= threshold if ties_up else v > threshold).int()
    return code


def reference(x, group_size: int = 32, scale_format: str = "ue8m0"):
    """torch reference, bit-exact: ``(q uint8 [M, N/2], scale [M, N/g])``."""
    import torch

    m, n = x.shape
    g = group_size
    xf = x.float().reshape(m, n // g, g)
    amax = xf.abs().amax(dim=-1, keepdim=True)
    if scale_format == "ue8m0":
        e = (((amax.view(torch.int32) + 0x3FFFFF) >> 23) - 2).clamp(min=1)
        inv = ((254 - e) << 23).view(torch.float32)  # 2^(127 - e), exact
        v = xf.abs() * inv
        scale = e.to(torch.uint8)
    elif scale_format == "e4m3":
        vals = e4m3_values().to(x.device)
        idx = torch.searchsorted(vals * 6, amax.reshape(-1).contiguous()).clamp(
            max=vals.numel() - 1
        )
        s = vals[idx].reshape(amax.shape)
        v = xf.abs() / s  # IEEE division of tensors (exact rounding on CPU and CUDA)
        scale = s.to(torch.float8_e4m3fn)
    else:
        raise ValueError(f"unknown scale_format {scale_format!r}")
    code = e2m1_codes(v) | (torch.signbit(xf).int() << 3)
    code = code.reshape(m, n)
    q = (code[:, 0::2] | (code[:, 1::2] << 4)).to(torch.uint8)
    return q, scale.reshape(m, n // g)


def _constraints(key, spec) -> dict[str, int]:
    return {} if spec else {"N": GROUPS[key["group"]]}


SPEC = KernelSpec(
    op="per_token_cast_fp4",
    factory=factory,
    keys=tuple(
        {"dtype": d, "group": g, "scale": s} for d in DTYPES for g in GROUPS for s in SCALES
    ),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    constraints=_constraints,
    doc="q, scale = e2m1(x / scale) packed 2 per byte, UE8M0 or E4M3 scale per 16/32 columns.",
)
