"""Per-channel cast to FP8 e4m3 written transposed: TileKernels 1.0.0's
``per_channel_cast_and_transpose(x, "e4m3", num_per_tokens, round_sf)``
(``tile_kernels/quant/per_channel_cast_and_transpose_kernel.py``; op
"per_channel_cast_and_transpose").

``x`` is ``[T, H]`` (tokens, hidden). Each hidden column ``h`` gets one fp32 scale per group of
``G = num_per_tokens`` tokens (32 or 128: keys ``g32``/``g128``), with the math of every other
FP8 cast (``quotient.py``)::

    amax  = max(max |x[group, h]|, 1e-4)
    scale = amax / 448  |  2^ceil(log2(amax / 448))     # round_sf = 0 | 1 (runtime scalar)
    inv   = 448 / amax  |  1 / scale
    q[h, t] = e4m3(clamp(x[t, h] * inv, -448, 448))      # RN, saturating

so ``q`` is ``[H, T]`` (the cast of ``x`` transposed) and ``scale`` ``[T / G, H]``: bit for
bit ``tile_kernels.torch.cast(x, "e4m3", (G, 1), round_sf=...)`` with its codes transposed,
which is what TileKernels' kernel computes. ``T % G == 0`` (TileKernels asks ``T % 128 == 0``
for both G) and ``H % 8 == 0`` (TileKernels: ``H % 64 == 0``).

Kernel: one CTA (256 threads) per tile of 128 tokens x 64 hidden columns. Thread ``tx`` loads
four 16-byte row vectors (8 columns of 4 tokens 32 apart; lane pairs cover a 32-byte sector),
all in flight before any use, and stores them as fp32 into a shared ``[64, 130]`` tile indexed
(column, token): the row stride of 130 words makes those stores conflict-free. Warp ``w`` then
owns columns ``32 * (w % 2) + lane`` and tokens ``32 * (w // 2) ...`` of the tile: it reads its
32 values in 8-byte pairs (conflict-free per half warp), takes their |x| max (g128: the four
warps of a column meet in shared memory), writes the scale and its 32 codes as two 16-byte
stores of a row of ``q``. x is read once and q written once. Grid ``(ceil(H/64),
ceil(T/128))``; gridDim.y stops at 65535, so the wrapper refuses T past 65535 * 128.

Non-finite x (TileKernels defines none): the |x| max ignores NaN (a NaN element is NaN in q,
its group cast as if it were 0); with round_sf=0 a group holding ±Inf gets an Inf scale and
multiplier 0. Finite inputs are exact.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .per_block_cast_fp8 import AMAX_FLOOR, FP8, FP8_MAX
from .per_channel_cast_fp8 import reference as channel_reference
from .quotient import inv_of, scale_of

DTYPES = ("bfloat16", "float16")
GROUPS = {"g32": 32, "g128": 128}  # tokens per scale (TileKernels' num_per_tokens)
TILE_T = 128  # tokens of a CTA's tile
TILE_H = 64  # hidden columns of a CTA's tile
THREADS = 256
VEC = 8  # elements of a 16-byte load
CHUNK = 32  # tokens a thread casts: TILE_T // CHUNK warps share a column
STRIDE = TILE_T + 2  # fp32 words per shared column: conflict-free transposed stores
LOADS = TILE_T * TILE_H // VEC // THREADS  # 16-byte loads per thread


def factory(arch: str, dtype: str, group: str):
    """TileLang prim_func ``(x[T, H], q[H, T] e4m3fn, scale[T // G, H] fp32, round_sf int32)``;
    ``G`` 32 (``g32``) or 128 (``g128``), ``round_sf`` non-zero: power-of-two scales. ``arch``
    does not change the code."""
    if dtype not in DTYPES:
        raise ValueError(f"per_channel_cast_and_transpose: unsupported dtype {dtype!r}")
    if group not in GROUPS:
        raise ValueError(f"per_channel_cast_and_transpose: unsupported group {group!r}")
    import tilelang.language as T

    g = GROUPS[group]
    Tn, H = T.dynamic("T"), T.dynamic("H")
    tile = transposed_tile(T, dtype, g, Tn, H, _load_macro(T))

    @T.prim_func
    def per_channel_cast_and_transpose(
        x: T.Tensor((Tn, H), dtype),
        q: T.Tensor((H, Tn), FP8),
        scale: T.Tensor((Tn // g, H), "float32"),
        round_sf: T.int32,
    ):
        with T.Kernel(ceildiv(T, H, TILE_H), ceildiv(T, Tn, TILE_T), threads=THREADS) as (bh, bt):
            tile(x, None, q, scale, round_sf, bh, bt)

    return per_channel_cast_and_transpose


def _load_macro(T):
    @T.macro
    def load(x, extra, buf, i, t, h):
        for v in T.vectorized(VEC):
            buf[i * VEC + v] = x[t, h + v]

    return load


def transposed_tile(T, dtype: str, g: int, Tn, H, load):
    """Macro ``cast(x, extra, q, scale, round_sf, bh, bt)``: the cast of tile (bh, bt) (tokens
    ``bt * 128 ...``, columns ``bh * 64 ...`` of the ``[T, H]`` values), its codes stored
    transposed into ``q[H, T]`` and its scales into ``scale[T // g, H]``. ``load(x, extra, buf,
    i, t, h)`` puts the 8 values ``(t, h ...)`` in x's dtype into ``buf[i * 8 ...]`` (16-byte
    aligned, inside the matrix); ``extra`` is the caller's (None, or a scalar it needs).
    Shared by per_channel_cast_and_transpose and swiglu_per_channel_cast_and_transpose."""
    warps_per_column = TILE_T // CHUNK

    @T.macro
    def cast(x, extra, q, scale, round_sf, bh, bt):
        T.assume(H % VEC == 0)
        T.assume(Tn % g == 0)
        tile = T.alloc_shared((TILE_H, STRIDE), "float32")
        partial = T.alloc_shared((warps_per_column, TILE_H), "float32")
        buf = T.alloc_local((LOADS * VEC,), dtype)
        vals = T.alloc_local((CHUNK,), "float32")
        q8 = T.alloc_local((CHUNK,), FP8)
        amax = T.alloc_var("float32")
        s = T.alloc_var("float32")
        inv = T.alloc_var("float32")
        tx = T.get_thread_binding()
        lane, warp = tx % 32, tx // 32
        # Load: lane pairs take adjacent vectors of a token row (one 32-byte sector).
        hv = lane % 2 + 2 * (warp % 4)  # the thread's vector of the tile's 8
        tr = lane // 2 + 16 * (warp // 4)  # its first token; then every 32nd
        h_in = bh * TILE_H + hv * VEC
        for i in T.unroll(LOADS):
            if (bt * TILE_T + tr + i * 32 < Tn) & (h_in < H):
                load(x, extra, buf, i, bt * TILE_T + tr + i * 32, h_in)
            else:
                for v in T.vectorized(VEC):
                    buf[i * VEC + v] = T.cast(0, dtype)
        # Word (h, t) is bank (2h + t) % 32: the lanes' 32 stores hit 32 banks.
        for i in T.unroll(LOADS):
            for v in T.unroll(VEC):
                tile[hv * VEC + v, tr + i * 32] = T.cast(buf[i * VEC + v], "float32")
        T.sync_threads()
        # Cast: column hl of the tile, tokens c * 32 ... of it.
        hl = (warp % 2) * 32 + lane
        c = warp // 2
        for k in T.unroll(CHUNK // 2):
            for v in T.vectorized(2):
                vals[k * 2 + v] = tile[hl, c * CHUNK + k * 2 + v]
        amax = T.float32(0)
        for k in T.unroll(CHUNK):
            amax = T.max(amax, T.abs(vals[k]))
        if g > CHUNK:  # g128: the tile's 4 chunks of a column are one group
            partial[c, hl] = amax
            T.sync_threads()
            for j in T.unroll(warps_per_column):
                amax = T.max(amax, partial[j, hl])
        amax = T.max(amax, AMAX_FLOOR)
        s = scale_of(T, amax, FP8_MAX, round_sf)
        inv = inv_of(T, amax, s, FP8_MAX, round_sf)
        h = bh * TILE_H + hl
        t0 = bt * TILE_T + c * CHUNK
        if (h < H) & (t0 < Tn):
            if (g == CHUNK) | (c == 0):
                scale[t0 // g, h] = s
            for k in T.unroll(CHUNK):
                vals[k] = T.ieee_mul(vals[k], inv)
            # fp32 -> e4m3 in pairs (__nv_cvt_float2_to_fp8x2: RN, satfinite).
            for k in T.unroll(CHUNK // 4):
                for v in T.vectorized(4):
                    q8[k * 4 + v] = vals[k * 4 + v]
            for half in T.unroll(CHUNK // 16):
                for k in T.vectorized(16):
                    q[h, t0 + half * 16 + k] = q8[half * 16 + k]

    return cast


def reference(x, group: int = 128, round_sf: bool = False):
    """torch reference, bit-exact for finite x: ``(q [H, T] e4m3fn, scale [T // group, H]
    float32)``, ``group`` tokens (32 or 128) per scale. TileKernels'
    ``tile_kernels.torch.cast(x, "e4m3", (group, 1), round_sf=round_sf)`` with its codes
    transposed computes the same bytes (tests/test_kernels_cpu_per_channel_cast_and_transpose.py).
    """
    if x.shape[0] % group:
        raise ValueError(f"reference: T = {x.shape[0]} is not a multiple of group {group}")
    q, scale = channel_reference(x, round_sf, rows=group)
    return q.t().contiguous(), scale


def _constraints(key, spec) -> dict[str, int]:
    return {"T": GROUPS[key["group"]], "H": VEC}


def tile_spec(op: str, factory, dtypes: tuple, reference, doc: str) -> KernelSpec:
    """The KernelSpec of an op built on `transposed_tile` (this one, its SwiGLU-fused twin):
    keys dtype x g32/g128, generic sizes only, T % G and H % 8, one lowering everywhere."""
    return KernelSpec(
        op=op,
        factory=factory,
        keys=tuple({"dtype": d, "group": g} for d in dtypes for g in GROUPS),
        specs=({},),
        reference=reference,
        lowering_classes=ALL_CUDA_SAME,
        lowering_reason="shared-memory transpose and column maxima, no block all-reduce, PDL or"
        " arch choice",
        constraints=_constraints,
        doc=doc,
    )


SPEC = tile_spec(
    "per_channel_cast_and_transpose",
    factory,
    DTYPES,
    reference,
    "q[H, T], scale = e4m3fn(x^T * RN(448/amax)), amax/448 (or its power-of-two ceiling) per"
    " column of each 32 or 128 tokens, as TileKernels' per_channel_cast_and_transpose.",
)
