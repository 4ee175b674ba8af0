"""Dequantise FP4 E2M1 codes with per-group UE8M0 or E4M3 scales (the inverse of
``per_token_cast_fp4``): ``out = e2m1(code) * scale``, in bfloat16 or float32.

Inputs are those ``per_token_cast_fp4`` writes (see its docstring for the format): ``q`` uint8
``[M, N/2]``, element ``2i`` in the low nibble of byte ``i``, bit 3 of a nibble the sign;
``scale`` ``[M, N/g]``, either uint8 UE8M0 or float8_e4m3fn. A UE8M0 byte ``e`` decodes as
TileKernels 1.0.0 decodes it (``tile_kernels.torch.cast`` ``transform_sf``; its kernels'
``transform_sf`` likewise): the float32 with exponent field ``e`` and zero mantissa, i.e.
``2^(e - 127)`` for 1..254, ``0.0`` for 0 and ``+inf`` for 255 (the OCP MX spec would read 0 as
2^-127 and 255 as NaN; TileKernels' casts never write either, see per_token_cast_fp4).
Every product is exact in float32 and in bfloat16 (E2M1 values have at most 2 significant
bits, scales at most 4), except that UE8M0 scales near 2^127 overflow to inf; ``0 * inf`` and
a NaN scale give NaN. ``-0`` codes give ``-0.0``.

Kernel (memory-bound: 0.5 byte read, 2 or 4 written per element). Like the cast, the problem
is flat: element ``f`` has its code in nibble ``f % 2`` of byte ``f // 2`` and its scale at
``f // g``. A thread decodes units of 32 output bytes (16 bf16 or 8 fp32 elements: 8 or 4
bytes of q, one scale) and writes them with 16-byte stores; ``UNROLL`` units per thread are
loaded before any is processed. Decoding a nibble needs no table: ``(code & 7) << 22`` read as
float32 is ``e2m1(code) * 2^-126`` (codes 0 and 1 become subnormals), the sign goes to bit 31,
and two multiplies (by 2^126, then by the scale) give the value, each exact.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..spec import ALL_CUDA_SAME, KernelSpec

OUT_DTYPES = ("bfloat16", "float32")
GROUPS = {"g16": 16, "g32": 32}
SCALES = ("ue8m0", "e4m3")
SCALE_DTYPE = {"ue8m0": "uint8", "e4m3": "float8_e4m3fn"}
ITEMSIZE = {"bfloat16": 2, "float32": 4}
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)

THREADS = 128
UNROLL = 2  # units (32 output bytes) per thread, loaded before the first is processed
UNIT_BYTES = 32


def factory(arch: str, dtype: str, group: str, scale: str, N: int | None = None):
    """TileLang prim_func ``(q[M, K] uint8, scale[M, 2K/g], out[M, 2K] dtype)``, K = N / 2.

    ``dtype`` is the output dtype; the same code serves every CUDA arch.
    """
    if dtype not in OUT_DTYPES or group not in GROUPS or scale not in SCALES:
        raise ValueError(f"cast_back_fp4: unsupported key {dtype!r}, {group!r}, {scale!r}")
    g = GROUPS[group]
    if N is not None and N % g:
        raise ValueError(f"cast_back_fp4: N={N} is not a multiple of {g}")
    return _kernel(dtype, g, scale, N)


def _kernel(dtype: str, g: int, scale_fmt: str, n: int | None):
    import tilelang.language as T

    ept = UNIT_BYTES // ITEMSIZE[dtype]  # elements per unit (thread)
    assert g % ept == 0, (g, ept)  # a unit has one scale
    in_words = ept // 8  # 32-bit words of codes per unit
    vec = 16 // ITEMSIZE[dtype]  # elements per 16-byte store
    M = T.dynamic("M")
    # Sizes are bound from the first tensor that has them as a whole dimension (q), so the
    # dynamic size is K = N / 2 bytes of codes per row, and N = 2 K.
    K = T.dynamic("K") if n is None else n // 2
    N = 2 * K

    @T.prim_func
    def cast_back_fp4(
        q: T.Tensor((M, K), "uint8"),
        scale: T.Tensor((M, N // g), SCALE_DTYPE[scale_fmt]),
        out: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(M * N, ept * THREADS * UNROLL), threads=THREADS) as bx:
            # Flat views (M * N < 2^31 is checked by the caller).
            units = M * N // ept
            qw = T.Tensor((M * N // 8,), "uint32", q.data)
            sf = T.Tensor((M * (N // g),), SCALE_DTYPE[scale_fmt], scale.data)
            of = T.Tensor((M * N,), dtype, out.data)
            tx = T.get_thread_binding()
            w = T.alloc_local((UNROLL, in_words), "uint32")
            sc = T.alloc_local((UNROLL,), SCALE_DTYPE[scale_fmt])
            y = T.alloc_local((ept,), dtype)
            for u in T.unroll(UNROLL):  # all loads first
                unit = (bx * UNROLL + u) * THREADS + tx
                if unit < units:
                    for v in T.vectorized(in_words):
                        w[u, v] = qw[unit * in_words + v]
                    sc[u] = sf[unit * ept // g]
                else:
                    for v in T.unroll(in_words):
                        w[u, v] = T.uint32(0)
                    sc[u] = T.cast(0, SCALE_DTYPE[scale_fmt])
            for u in T.unroll(UNROLL):
                unit = (bx * UNROLL + u) * THREADS + tx
                s = _scale_value(T, scale_fmt, sc[u])
                for k in list(range(ept)):
                    y[k] = T.cast(_decode(T, w[u, k // 8], k % 8) * s, dtype)
                if unit < units:
                    for h in T.unroll(ept // vec):
                        for v in T.vectorized(vec):
                            of[unit * ept + h * vec + v] = y[h * vec + v]

    return cast_back_fp4


def _scale_value(T, scale_fmt: str, stored):
    """The float32 value of a stored scale (exact; UE8M0: the byte as the exponent field, so 0
    is 0.0 and 255 is +inf, as TileKernels decodes it)."""
    if scale_fmt == "e4m3":
        return T.cast(stored, "float32")
    return T.reinterpret(T.cast(stored, "uint32") << T.uint32(23), "float32")


def _decode(T, word, k: int):
    """Signed E2M1 value of nibble `k` of `word`, as float32 (exact)."""
    nibble = word >> T.uint32(4 * k)
    bits = ((nibble & T.uint32(7)) << T.uint32(22)) | ((nibble & T.uint32(8)) << T.uint32(28))
    return T.reinterpret(bits, "float32") * T.float32(2.0**126)


def decode_values(q):
    """float64 ``[M, 2K]`` E2M1 values of packed codes ``q`` uint8 ``[M, K]`` (exact; ``-0``
    codes give ``-0.0``)."""
    import torch

    m, half = q.shape
    codes = torch.stack([q & 0xF, q >> 4], dim=-1).reshape(m, 2 * half).long()
    table = torch.tensor(E2M1_VALUES, dtype=torch.float64, device=q.device)
    return table[codes & 7] * torch.where(codes >= 8, -1.0, 1.0).double()


def reference(q, scale, group_size: int = 32, out_dtype=None):
    """torch reference, bit-exact: decode in float64, multiply, round to `out_dtype`.

    ``scale`` is uint8 (UE8M0) or float8_e4m3fn; ``out_dtype`` defaults to bfloat16.
    """
    import torch

    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    m, n = q.shape[0], 2 * q.shape[1]
    values = decode_values(q)
    if scale.dtype == torch.uint8:  # TileKernels' decoding: the byte as a float32 exponent
        s = (scale.int() << 23).view(torch.float32).double()  # 0 -> 0.0, 255 -> +inf
    else:
        s = scale.double()
    out = values.reshape(m, n // group_size, group_size) * s.unsqueeze(-1)
    # float64 -> float32 first: one rounding (exact here) and float32 overflow to inf.
    return out.reshape(m, n).float().to(out_dtype)


def _constraints(key, spec) -> dict[str, int]:
    return {} if spec else {"K": GROUPS[key["group"]] // 2}  # N = 2 K, N % g == 0


SPEC = KernelSpec(
    op="cast_back_fp4",
    factory=factory,
    keys=tuple(
        {"dtype": d, "group": g, "scale": s} for d in OUT_DTYPES for g in GROUPS for s in SCALES
    ),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    constraints=_constraints,
    doc="out = e2m1(q) * scale per 16/32 columns (UE8M0 or E4M3 scale), bf16 or fp32 out.",
)
