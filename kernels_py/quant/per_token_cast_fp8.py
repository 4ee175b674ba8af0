"""Per-token(-group) cast to FP8 e4m3 (OCP e4m3fn, max 448) with fp32 scales.

TileKernels 1.0.0's ``per_token_cast(x, "e4m3", 32, 64, 128 or N, round_sf=...)`` with row-major
fp32 scales, bit for bit (its reference ``tile_kernels.torch.cast``; ``quotient.py``). For each
group (32, 64 or 128 columns of a row for ``g32``/``g64``/``g128``, the whole row for ``token``)::

    amax  = max(max |x|, 1e-4)          # the floor keeps all-zero groups finite
    scale = amax / 448                  # round_sf = 0
          | 2^ceil(log2(amax / 448))    # round_sf = 1 (a runtime scalar)
    inv   = 448 / amax  |  1 / scale    # (exact for pow2)
    q     = e4m3(x * inv)               # round to nearest even, saturating at ±448

All fp32; both divisions IEEE (``__fdiv_rn``, immune to fast-math flags) once per group and one
multiply per element, so ``reference`` reproduces ``q`` and ``scale`` bit for bit for finite x.
|x * inv| <= 448 up to an ulp, so the conversion's saturation (below) does what the
reference's clamp does. Non-finite x: unspecified (TileKernels' kernel and reference disagree
there too: the kernel's |x| max ignores NaN, torch's propagates it).

TileLang 0.1.15 lowers the fp32 -> fp8 cast to
``__nv_cvt_float2_to_fp8x2(..., __NV_SATFINITE, __NV_E4M3)`` (cvt.rn.satfinite on sm_89+,
CUDA's round-to-nearest-even emulation below that), the same rounding as torch's
``.to(torch.float8_e4m3fn)``.

Kernels:

* ``g128`` (``g32``, ``g64`` alike): one CTA (256 threads) per ``TILE_ROWS`` rows x one 128-column
  group (``TILE_ROWS * 128 / group`` rows of a narrower group: the same 4 vectors per thread),
  SIMT-style as ``per_block_cast_fp8``: ``lanes`` = 16 threads (32 for fp32; 4 or 8 for
  ``g32``/``g64``, 8 or 16 for their fp32) share a row's group, one 16-byte
  vector each, and each thread loads all its ``steps`` vectors (rows 16 apart; 8 for fp32) before
  using any. A group max is a thread max then xor shuffles inside the aligned run of ``lanes``
  lanes; every lane then computes the scale and multiplier itself (no broadcast needed).
  ``__launch_bounds__(256, MIN_BLOCKS)`` keeps 3 CTAs' loads in flight per SM. This layout
  replaced a ``T.Parallel`` tile of one vector per thread (197 -> 180 us, H200, T = 32768,
  N = 7168; bench/results/2026-11-29-h200-tuning.md). Static N and generic (N dynamic,
  ``N % group == 0`` assumed so rows stay 16-byte aligned) share the code; ``g32``/``g64``
  are built generic only (each new variant is traced for every arch).
* ``token``: one row per block in chunks, two passes (amax, then quantise), with a runtime
  branch between 16-byte vector access (N a multiple of the vector) and scalar access.

Global accesses are one 16-byte vector at most (``T.vectorized(vec)``, ``coalesced_width`` in
the token pass): TileLang 0.1.15 emits 32-byte accesses on sm_100a otherwise (32-byte
alignment needed; fp32 broadcasts miscompile).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..spec import ALL_CUDA_SAME, BY_GENERATION, KernelSpec
from .quotient import inv_of, reference_scale_and_inv, scale_of

DTYPES = ("bfloat16", "float16", "float32")
GROUPS_MODES = ("g128", "token", "g32", "g64")
GROUP_WIDTHS = {"g32": 32, "g64": 64, "g128": 128}  # columns per scale of the grouped modes
FP8 = "float8_e4m3fn"  # OCP e4m3fn (torch.float8_e4m3fn); "float8_e4m3" emits the same code
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}
FP8_MAX = 448.0
AMAX_FLOOR = 1e-4
GROUP = 128

THREADS = 256  # g128: threads per CTA, a power of two (8 warps)
TOKEN_THREADS = 128  # token: threads per CTA (one row)
TILE_ROWS = 64  # g128: rows per CTA (one 128-column group): 4 vectors per thread (bf16)
MAX_ROW_TILES = 65535  # g128: gridDim.y limit; the wrapper launches at most this many row tiles
# g128: CTAs per SM the register budget must allow (__launch_bounds__): caps registers so
# several CTAs' loads are in flight per SM.
MIN_BLOCKS = {"bfloat16": 3, "float16": 3, "float32": 2}
TOKEN_UNROLL = 2  # token: 16-byte vectors per thread per chunk
SCALAR_PER_THREAD = 4  # token: scalar elements per thread per chunk on the unaligned path


def factory(arch: str, dtype: str, group: str, N: int | None = None):
    """TileLang prim_func ``(x[M, N], q[M, N] e4m3fn, scale[M, G] float32, round_sf int32)``.

    ``G = N // 32, 64, 128`` for ``g32``/``g64``/``g128`` and 1 for ``token``; ``round_sf``
    non-zero: power-of-two scales (TileKernels' ``round_sf=True``). ``arch`` does not change
    the code.
    """
    if dtype not in DTYPES or group not in GROUPS_MODES:
        raise ValueError(f"per_token_cast_fp8: unsupported key {dtype!r}, {group!r}")
    if group in GROUP_WIDTHS:
        width = GROUP_WIDTHS[group]
        if N is not None and N % width:
            raise ValueError(f"per_token_cast_fp8: N={N} is not a multiple of {width}")
        return _grouped(dtype, width, N)
    if N is not None:
        raise ValueError("per_token_cast_fp8: the token mode only has a generic variant")
    return _token(dtype)


def _grouped(dtype: str, width: int, n: int | None):
    import tilelang.language as T

    vec = 16 // ITEMSIZE[dtype]  # elements per 16-byte vector of x
    lanes = width // vec  # lanes per (row, group): 16, or 32 for fp32 (g128)
    rows_step = THREADS // lanes  # rows per load step
    tile_rows = TILE_ROWS * GROUP // width  # narrower groups: more rows, the same steps
    steps = tile_rows // rows_step  # vectors per thread, all loaded before the first use
    zero = T.cast(0, dtype)
    M = T.dynamic("M")
    N = T.dynamic("N") if n is None else n
    G = N // width

    @T.prim_func
    def per_token_cast_fp8(
        x: T.Tensor((M, N), dtype),
        q: T.Tensor((M, N), FP8),
        scale: T.Tensor((M, G), "float32"),
        round_sf: T.int32,
    ):
        # Groups on gridDim.x, so consecutive CTAs read neighbouring 256-byte pieces of the
        # same rows (180 us against 198 us with row tiles first, H200, T = 32768, N = 7168).
        # gridDim.y (65535) caps M at MAX_ROW_TILES * tile_rows: the wrapper splits above
        # MAX_ROW_TILES * TILE_ROWS (the least of them).
        with T.Kernel(G, T.ceildiv(M, tile_rows), threads=THREADS) as (bg, bm):
            T.annotate_min_blocks_per_sm(MIN_BLOCKS[dtype])
            if n is None:
                # The constraint N % width == 0 keeps every row 16-byte aligned.
                T.assume(N % width == 0)
            tx = T.get_thread_binding()
            buf = T.alloc_local((steps * vec,), dtype)
            amax = T.alloc_local((steps,), "float32")
            yq = T.alloc_local((vec,), "float32")
            q8 = T.alloc_local((vec,), FP8)
            s = T.alloc_var("float32")
            inv = T.alloc_var("float32")
            col = bg * width + (tx % lanes) * vec
            row0 = bm * tile_rows + tx // lanes
            # Load: every vector of this thread before any use (steps loads in flight).
            for i in T.unroll(steps):
                if row0 + i * rows_step < M:
                    for v in T.vectorized(vec):
                        buf[i * vec + v] = x[row0 + i * rows_step, col + v]
                else:
                    for v in T.vectorized(vec):
                        buf[i * vec + v] = zero
            # |x| max of each (row, group): the thread's vector, then xor shuffles inside the
            # aligned run of `lanes` lanes that holds the row's group.
            for i in T.unroll(steps):
                amax[i] = T.float32(0)
                for v in T.unroll(vec):
                    amax[i] = T.max(amax[i], T.abs(T.cast(buf[i * vec + v], "float32")))
            for k in T.unroll(_log2(lanes)):
                for i in T.unroll(steps):
                    amax[i] = T.max(amax[i], T.shfl_xor(amax[i], lanes >> (k + 1)))
            for i in T.unroll(steps):
                row = row0 + i * rows_step
                s = scale_of(T, T.max(amax[i], AMAX_FLOOR), FP8_MAX, round_sf)
                inv = inv_of(T, T.max(amax[i], AMAX_FLOOR), s, FP8_MAX, round_sf)
                if (tx % lanes == 0) & (row < M):
                    scale[row, bg] = s
                for v in T.unroll(vec):
                    yq[v] = T.ieee_mul(T.cast(buf[i * vec + v], "float32"), inv)
                # fp32 -> e4m3 in pairs (a vectorised cast: cvt.rn.satfinite on sm_89+).
                for v in T.vectorized(vec):
                    q8[v] = yq[v]
                if row < M:
                    for v in T.vectorized(vec):
                        q[row, col + v] = q8[v]

    return per_token_cast_fp8


def _log2(value: int) -> int:
    assert value & (value - 1) == 0, value
    return value.bit_length() - 1


def _token(dtype: str):
    import tilelang.language as T

    vec = 16 // ITEMSIZE[dtype]
    M = T.dynamic("M")
    N = T.dynamic("N")
    vec_rows = _token_pass(T, N, TOKEN_THREADS * vec * TOKEN_UNROLL, T.int32(vec))
    scalar_rows = _token_pass(T, N, TOKEN_THREADS * SCALAR_PER_THREAD, None)

    @T.prim_func
    def per_token_cast_fp8(
        x: T.Tensor((M, N), dtype),
        q: T.Tensor((M, N), FP8),
        scale: T.Tensor((M, 1), "float32"),
        round_sf: T.int32,
    ):
        with T.Kernel(M, threads=TOKEN_THREADS) as row:
            if N % vec == 0:
                T.assume(N % vec == 0)  # rows start 16-byte aligned: vector access
                vec_rows(x, q, scale, round_sf, row)
            else:
                scalar_rows(x, q, scale, round_sf, row)

    return per_token_cast_fp8


def _token_pass(T, N, chunk: int, width):
    """Macro quantising one row of dynamic length N, ``chunk`` elements per step.

    ``width`` (IntImm or None) is bound here: as a macro argument it would not stay constant.
    """

    @T.macro
    def quantise_row(x, q, scale, round_sf, row):
        buf = T.alloc_fragment((chunk,), "float32")
        amax = T.alloc_fragment((1,), "float32")
        sc = T.alloc_fragment((1,), "float32")
        inv = T.alloc_fragment((1,), "float32")
        # Pass 1: per-thread |x| maxima, then one block all-reduce.
        T.clear(buf)
        for c in T.serial(T.ceildiv(N, chunk)):
            for j in T.Parallel(chunk, coalesced_width=width):
                if c * chunk + j < N:
                    buf[j] = T.max(buf[j], T.abs(T.cast(x[row, c * chunk + j], "float32")))
        T.reduce_max(buf, amax, dim=0)
        sc[0] = scale_of(T, T.max(amax[0], AMAX_FLOOR), FP8_MAX, round_sf)
        inv[0] = inv_of(T, T.max(amax[0], AMAX_FLOOR), sc[0], FP8_MAX, round_sf)
        scale[row, 0] = sc[0]
        # Pass 2: re-read the row (L1/L2 hit), quantise into buf, then cast and store.
        for c in T.serial(T.ceildiv(N, chunk)):
            for j in T.Parallel(chunk, coalesced_width=width):
                v = T.if_then_else(c * chunk + j < N, x[row, c * chunk + j], 0)
                buf[j] = T.ieee_mul(T.cast(v, "float32"), inv[0])
            for j in T.Parallel(chunk, coalesced_width=width):
                if c * chunk + j < N:
                    q[row, c * chunk + j] = buf[j]

    return quantise_row


def reference(x, group_size: int | None = GROUP, round_sf: bool = False):
    """torch reference, bit-exact for finite x: ``group_size=None`` means one group per row
    (token); ``round_sf``: the power-of-two scales (the kernel's scalar). TileKernels'
    ``tile_kernels.torch.cast(x, "e4m3", (1, group_size), round_sf=round_sf)`` computes the
    same bytes (tests/test_parity_quant.py)."""
    import torch

    m, n = x.shape
    gs = n if group_size is None else group_size
    xg = x.float().reshape(m, n // gs, gs)
    amax = xg.abs().amax(dim=-1, keepdim=True).clamp(min=AMAX_FLOOR)
    scale, inv = reference_scale_and_inv(amax, FP8_MAX, round_sf)
    q = (xg * inv).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.reshape(m, n), scale.reshape(m, n // gs)


def _supports(arch, key, spec) -> bool:
    return key["group"] == "g128" or not spec  # the other modes have only the generic variant


def _constraints(key, spec) -> dict[str, int]:
    width = GROUP_WIDTHS.get(key["group"])
    return {"N": width} if width and not spec else {}


def _lowering_classes(key, spec):
    """The token mode's block-wide amax takes a named barrier from sm_80 on (TileLang 0.1.15);
    the group modes reduce within a warp and lower alike everywhere."""
    return BY_GENERATION if key["group"] == "token" else ALL_CUDA_SAME


SPEC = KernelSpec(
    op="per_token_cast_fp8",
    factory=factory,
    keys=tuple({"dtype": d, "group": g} for d in DTYPES for g in GROUPS_MODES),
    specs=({}, {"N": 4096}, {"N": 7168}),
    reference=reference,
    lowering_classes=_lowering_classes,
    lowering_reason="groups: warp-wide amax, one source; token: block-wide amax, by generation",
    supports=_supports,
    constraints=_constraints,
    doc="q, scale = e4m3fn(x * RN(448/amax)), amax/448 (or its power-of-two ceiling) per"
    " 32/64/128-column group (g32/g64/g128) or per row, as TileKernels' per_token_cast.",
)
