"""Per-token(-group) cast to FP8 e4m3 (OCP e4m3fn, max 448) with fp32 scales.

For each group (128 columns of a row for ``g128``, the whole row for ``token``)::

    amax  = max(max |x|, 1e-4)          # the floor keeps all-zero groups finite
    scale = amax / 448
    q     = e4m3(x / scale)             # round to nearest even, saturating at ±448

All fp32; ``scale`` by IEEE division (``__fdiv_rn``, immune to fast-math flags) and ``x / scale``
correctly rounded with one reciprocal per group (``quotient.py``: five FP32 ops per element
instead of an IEEE division, which made this kernel issue-bound), so ``reference`` reproduces
``q`` and ``scale`` bit for bit for finite x. |x / scale| <= 448 by construction, so the
conversion's saturation (below) does what the reference's clamp does; a NaN element stays NaN
in q (the reference's clamp would keep it NaN too, but its amax turns the group NaN).

TileLang 0.1.15 lowers the fp32 -> fp8 cast to
``__nv_cvt_float2_to_fp8x2(..., __NV_SATFINITE, __NV_E4M3)`` (cvt.rn.satfinite on sm_89+,
CUDA's round-to-nearest-even emulation below that), the same rounding as torch's
``.to(torch.float8_e4m3fn)``.

Kernels:

* ``g128``: a block (128 threads) owns ``ROWS`` rows x ``GROUPS`` groups; each thread holds
  16-byte vectors of x (8 bf16/fp16 or 4 fp32 elements), so a group max is a 16- or 32-lane
  shuffle reduction. Static N and generic (N dynamic, ``N % 128 == 0`` assumed so rows stay
  16-byte aligned) share the code.
* ``token``: one row per block in chunks, two passes (amax, then quantise), with a runtime
  branch between 16-byte vector access (N a multiple of the vector) and scalar access.

Loops touching x carry ``coalesced_width`` = one 16-byte vector: otherwise TileLang 0.1.15
emits 32-byte accesses on sm_100a (32-byte alignment needed; fp32 broadcasts miscompile).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..spec import KernelSpec
from .quotient import quotient, reciprocal

DTYPES = ("bfloat16", "float16", "float32")
GROUPS_MODES = ("g128", "token")
FP8 = "float8_e4m3fn"  # OCP e4m3fn (torch.float8_e4m3fn); "float8_e4m3" emits the same code
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}
FP8_MAX = 448.0
AMAX_FLOOR = 1e-4
GROUP = 128

ROWS = 1  # g128: rows per block (1 measured 11 % faster than 4 on an H200: occupancy)
GROUPS = 8  # g128: groups per block (128 threads, 8 elements each)
THREADS = 128
TOKEN_UNROLL = 2  # token: 16-byte vectors per thread per chunk
SCALAR_PER_THREAD = 4  # token: scalar elements per thread per chunk on the unaligned path


def factory(arch: str, dtype: str, group: str, N: int | None = None):
    """TileLang prim_func ``(x[M, N], q[M, N] e4m3fn, scale[M, G] float32)``.

    ``G = N // 128`` for ``g128`` and 1 for ``token``; ``arch`` does not change the code.
    """
    if dtype not in DTYPES or group not in GROUPS_MODES:
        raise ValueError(f"per_token_cast_fp8: unsupported key {dtype!r}, {group!r}")
    if group == "g128":
        if N is not None and N % GROUP:
            raise ValueError(f"per_token_cast_fp8: N={N} is not a multiple of {GROUP}")
        return _g128(dtype, N)
    if N is not None:
        raise ValueError("per_token_cast_fp8: the token mode only has a generic variant")
    return _token(dtype)


def _g128(dtype: str, n: int | None):
    import tilelang.language as T

    width = T.int32(16 // ITEMSIZE[dtype])  # one 16-byte vector of x per access
    M = T.dynamic("M")
    N = T.dynamic("N") if n is None else n
    G = N // GROUP

    @T.prim_func
    def per_token_cast_fp8(
        x: T.Tensor((M, N), dtype),
        q: T.Tensor((M, N), FP8),
        scale: T.Tensor((M, G), "float32"),
    ):
        # Rows on gridDim.x (up to 2^31 - 1); gridDim.y (65535) would cap M at 262,140.
        with T.Kernel(T.ceildiv(M, ROWS), T.ceildiv(G, GROUPS), threads=THREADS) as (bm, bg):
            if n is None:
                # The constraint N % 128 == 0 keeps every row 16-byte aligned: tell the
                # vectoriser, or it falls back to scalar loads and a 128-thread reduction.
                T.assume(N % GROUP == 0)
            xs = T.alloc_fragment((ROWS, GROUPS, GROUP), "float32")
            amax = T.alloc_fragment((ROWS, GROUPS), "float32")
            rcp = T.alloc_fragment((ROWS, GROUPS), "float32")
            for r, g, j in T.Parallel(ROWS, GROUPS, GROUP, coalesced_width=width):
                row = bm * ROWS + r
                grp = bg * GROUPS + g
                xs[r, g, j] = T.if_then_else((row < M) & (grp < G), x[row, grp * GROUP + j], 0)
            T.reduce_absmax(xs, amax, dim=2)
            for r, g in T.Parallel(ROWS, GROUPS):  # amax becomes the scale in place
                amax[r, g] = T.ieee_fdiv(T.max(amax[r, g], AMAX_FLOOR), FP8_MAX)
                rcp[r, g] = reciprocal(T, amax[r, g])
                if (bm * ROWS + r < M) & (bg * GROUPS + g < G):
                    scale[bm * ROWS + r, bg * GROUPS + g] = amax[r, g]
            # Quantise into the fp32 fragment first: a separate cast-and-store loop lets
            # TileLang emit paired cvt + vector stores.
            for r, g, j in T.Parallel(ROWS, GROUPS, GROUP):
                xs[r, g, j] = quotient(T, xs[r, g, j], amax[r, g], rcp[r, g])
            for r, g, j in T.Parallel(ROWS, GROUPS, GROUP, coalesced_width=width):
                if (bm * ROWS + r < M) & (bg * GROUPS + g < G):
                    q[bm * ROWS + r, (bg * GROUPS + g) * GROUP + j] = xs[r, g, j]

    return per_token_cast_fp8


def _token(dtype: str):
    import tilelang.language as T

    vec = 16 // ITEMSIZE[dtype]
    M = T.dynamic("M")
    N = T.dynamic("N")
    vec_rows = _token_pass(T, N, THREADS * vec * TOKEN_UNROLL, T.int32(vec))
    scalar_rows = _token_pass(T, N, THREADS * SCALAR_PER_THREAD, None)

    @T.prim_func
    def per_token_cast_fp8(
        x: T.Tensor((M, N), dtype),
        q: T.Tensor((M, N), FP8),
        scale: T.Tensor((M, 1), "float32"),
    ):
        with T.Kernel(M, threads=THREADS) as row:
            if N % vec == 0:
                T.assume(N % vec == 0)  # rows start 16-byte aligned: vector access
                vec_rows(x, q, scale, row)
            else:
                scalar_rows(x, q, scale, row)

    return per_token_cast_fp8


def _token_pass(T, N, chunk: int, width):
    """Macro quantising one row of dynamic length N, ``chunk`` elements per step.

    ``width`` (IntImm or None) is bound here: as a macro argument it would not stay constant.
    """

    @T.macro
    def quantise_row(x, q, scale, row):
        buf = T.alloc_fragment((chunk,), "float32")
        amax = T.alloc_fragment((1,), "float32")
        rcp = T.alloc_fragment((1,), "float32")
        # Pass 1: per-thread |x| maxima, then one block all-reduce.
        T.clear(buf)
        for c in T.serial(T.ceildiv(N, chunk)):
            for j in T.Parallel(chunk, coalesced_width=width):
                if c * chunk + j < N:
                    buf[j] = T.max(buf[j], T.abs(T.cast(x[row, c * chunk + j], "float32")))
        T.reduce_max(buf, amax, dim=0)
        amax[0] = T.ieee_fdiv(T.max(amax[0], AMAX_FLOOR), FP8_MAX)
        rcp[0] = reciprocal(T, amax[0])
        scale[row, 0] = amax[0]
        # Pass 2: re-read the row (L1/L2 hit), quantise into buf, then cast and store.
        for c in T.serial(T.ceildiv(N, chunk)):
            for j in T.Parallel(chunk, coalesced_width=width):
                v = T.if_then_else(c * chunk + j < N, x[row, c * chunk + j], 0)
                buf[j] = quotient(T, T.cast(v, "float32"), amax[0], rcp[0])
            for j in T.Parallel(chunk, coalesced_width=width):
                if c * chunk + j < N:
                    q[row, c * chunk + j] = buf[j]

    return quantise_row


def reference(x, group_size: int | None = GROUP):
    """torch reference, bit-exact: ``group_size=None`` means one group per row (token)."""
    import torch

    m, n = x.shape
    gs = n if group_size is None else group_size
    xg = x.float().reshape(m, n // gs, gs)
    amax = xg.abs().amax(dim=-1, keepdim=True).clamp(min=AMAX_FLOOR)
    # A tensor divisor on purpose: torch turns division by a Python scalar into multiplication
    # by its reciprocal on CUDA, which is off by one ulp for some amax; the kernel divides.
    scale = amax / torch.full_like(amax, FP8_MAX)
    q = (xg / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.reshape(m, n), scale.reshape(m, n // gs)


def _supports(arch, key, spec) -> bool:
    return key["group"] == "g128" or not spec  # token has only the generic variant


def _constraints(key, spec) -> dict[str, int]:
    return {"N": GROUP} if key["group"] == "g128" and not spec else {}


SPEC = KernelSpec(
    op="per_token_cast_fp8",
    factory=factory,
    keys=tuple({"dtype": d, "group": g} for d in DTYPES for g in GROUPS_MODES),
    specs=({}, {"N": 4096}, {"N": 7168}),
    reference=reference,
    supports=_supports,
    constraints=_constraints,
    doc="q, scale = e4m3fn(x / scale), max|x|/448 per 128-column group (g128) or per row.",
)
