"""Transpose of the last two dimensions: ``y[b, c, r] = x[b, r, c]`` (x[B, R, C] -> y[B, C, R]).

Elements are only moved (loads, shared-memory round trip, stores; never converted), so the
result is bit-exact, fp8 NaN encodings included. The Python layer also serves every other dtype
of 1, 2 or 4 bytes through the kernel of that width.

One thread block (128 threads; 256 for 1-byte types) transposes one tile of ``tr`` rows x 256
bytes of x (128 x 256 for 1-byte, 64 x 128 for 2-byte, 64 x 64 for 4-byte elements: 32, 16, 16
KiB):

* Load phase: each thread issues 8 loads of 16 bytes before using any (128 bytes in flight per
  thread); a warp reads 4 whole 128-byte row segments of x (fully coalesced), the next warp
  the other half of those rows. 256-byte row segments made the bf16 transpose 3.5 % faster
  than 128-byte ones (H200, 32768 x 7168: 232.8 against 241.1 us under TileLang's JIT; 234.3
  us, 94 % of copy, on a build; bench/results/2026-11-29-h200-tuning.md, "Session 6"): each
  DRAM page of x is opened for twice the bytes.
* Each thread scatters its elements into the *transposed* tile in shared memory (row ``c``
  holds column ``c`` of the x tile, ``tr`` elements). Then every thread copies 8 vectors of 16
  bytes from shared memory straight to y (``ld.shared.v4`` -> ``st.global.v4``; 8 lanes
  write 128 contiguous bytes of an output row). Gathering a vector in registers instead made
  NVRTC split the 16-byte store into four 4-byte stores.
* Shared memory is XOR-swizzled in 16-byte chunks: chunk ``j`` of transposed row ``c`` is
  stored at chunk ``j ^ ((c // v) % 8)`` (``v`` = elements per 16 bytes). In the scatter a warp
  covers 4 rows x 8 column chunks of x: the 8 chunks land in 8 distinct bank groups, the 4
  rows within one 32-bit word or in distinct words; the 16-byte reads of a quarter warp cover
  8 chunks of one row. No access of either phase has a bank conflict (a warp covering 2 rows
  x 16 chunks instead would put chunks j and j + 8 in one bank group: 2-way conflicts).
* Sizes are runtime (B, R, C) with tails: when ``R % v == 0 and C % v == 0`` every 16-byte
  chunk lies wholly inside or outside the matrix and rows stay 16-byte aligned, so global
  memory moves in 16-byte vectors with one guard per vector; otherwise a scalar path with
  per-element guards moves tiles of ``tr`` rows x 128 bytes, 4 vectors' worth per thread
  (still coalesced per warp, via L1; issue-bound, so smaller tiles and more blocks suit it).
* Grid ``(max(tiles_r, tiles_c), min(tiles_r, tiles_c), B)``: no index division at all. The
  longer tile axis takes gridDim.x (up to 2**31 - 1); the shorter has < 725 tiles since
  R * C < 2**31, inside gridDim.y's 65535; the caller splits B above 65535 (gridDim.z).

Global accesses are explicit ``T.vectorized(v)`` loops of one 16-byte vector, never wider
(TileLang 0.1.15 emits 32-byte accesses on sm_100a otherwise). Base pointers must be 16-byte
aligned (the Python layer checks).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..spec import ALL_CUDA_SAME, KernelSpec

DTYPES = ("float8_e4m3fn", "bfloat16", "float16", "float32")
ITEMSIZE = {"float8_e4m3fn": 1, "bfloat16": 2, "float16": 2, "float32": 4}
ROW_BYTES = 256  # bytes of each x row per tile: two 128-byte lines
# Rows of x per tile, by itemsize: output row segments of 128 (1, 2 bytes) or 256 bytes.
TILE_R = {1: 128, 2: 64, 4: 64}
LOADS = 8  # 16-byte vectors per thread and phase: 8 independent loads in flight per thread
# The scalar path (R or C not a multiple of 16 bytes' elements) keeps 128-byte tile rows and 4
# vectors per thread: it is issue-bound, and the wider tile made it 1.5x slower (H200, bf16
# 8 x 1024 x 1030: 60.6 against 39.6 us).
SCALAR_ROW_BYTES = 128
SCALAR_LOADS = 4
MAX_GRID_Z = 65535  # CUDA's gridDim.z limit: B above it is split into several launches


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(x[B, R, C], y[B, C, R])``.

    The same code serves every CUDA arch, so ``arch`` only takes part in the interface.
    """
    if dtype not in DTYPES:
        raise ValueError(f"transpose: unsupported dtype {dtype!r}")
    import tilelang.language as T

    v = 16 // ITEMSIZE[dtype]  # elements per 16-byte vector
    tr = TILE_R[ITEMSIZE[dtype]]
    threads = tr * ROW_BYTES // 16 // LOADS  # 256 for 1-byte types, 128 otherwise
    assert threads == tr * SCALAR_ROW_BYTES // 16 // SCALAR_LOADS  # both paths, one block shape
    tc_vec = ROW_BYTES // ITEMSIZE[dtype]  # tile columns (of x), 16-byte path
    tc_scalar = SCALAR_ROW_BYTES // ITEMSIZE[dtype]

    B = T.dynamic("B")
    R = T.dynamic("R")
    C = T.dynamic("C")
    tiles_r = T.ceildiv(R, tr)

    def tile_pass(vector: bool, row_bytes: int, loads: int):
        """Macro moving one tile of ``tr`` rows x ``row_bytes`` of x, ``loads`` vectors per
        thread; ``vector`` picks 16-byte or guarded scalar global access."""
        tc = row_bytes // ITEMSIZE[dtype]
        chunks = row_bytes // 16  # 16-byte vectors per tile row of x
        rvecs = tr // v  # 16-byte vectors per output row segment (8, or 16 for 4-byte types)
        assert tc * rvecs == loads * threads and rvecs % 8 == 0 and chunks % 8 == 0
        tiles_c = T.ceildiv(C, tc)

        @T.macro
        def move(x, y, s, reg, b, bx, by, tx):
            # The grid's longer axis (gridDim.x) walks the longer tile axis (see transpose).
            r_major = tiles_r >= tiles_c
            r0 = T.Select(r_major, bx, by) * tr
            c0 = T.Select(r_major, by, bx) * tc
            # Load phase. All loads are issued before the first shared-memory store (16 *
            # loads bytes in flight per thread): one register vector per load.
            for i in T.unroll(loads):
                r, ch = place(i * threads + tx, chunks)
                row = r0 + r
                col = c0 + ch * v
                if vector:
                    if (row < R) & (col < C):
                        for k in T.vectorized(v):
                            reg[i, k] = x[b, row, col + k]
                else:
                    for k in T.unroll(v):
                        # A plain guarded copy, no select with a 0 of the dtype: that would
                        # convert (and canonicalise fp8 NaNs); unset lanes are never stored.
                        if (row < R) & (col + k < C):
                            reg[i, k] = x[b, row, col + k]
            # Scatter each vector's elements into the transposed tile (row c, column r).
            for i in T.unroll(loads):
                r, ch = place(i * threads + tx, chunks)  # ch = c // v for the v elements c moved
                at = T.bitwise_xor(r // v, ch % 8) * v + r % v
                for k in T.unroll(v):
                    s[(ch * v + k) * tr + at] = reg[i, k]
            T.sync_threads()
            # Store phase: 16-byte vectors straight from shared to global memory; 8
            # consecutive lanes cover 128 contiguous bytes of one output row.
            for i in T.unroll(loads):
                p = i * threads + tx
                c = p // rvecs
                rv = p % rvecs
                at = c * tr + T.bitwise_xor(rv, (c // v) % 8) * v
                col = c0 + c
                row = r0 + rv * v
                if vector:
                    if (col < C) & (row < R):
                        for k in T.vectorized(v):
                            y[b, col, row + k] = s[at + k]
                else:
                    for k in T.unroll(v):
                        if (col < C) & (row + k < R):
                            y[b, col, row + k] = s[at + k]

        return move

    vector_tile = tile_pass(True, ROW_BYTES, LOADS)
    scalar_tile = tile_pass(False, SCALAR_ROW_BYTES, SCALAR_LOADS)

    @T.prim_func
    def transpose(
        x: T.Tensor((B, R, C), dtype),
        y: T.Tensor((B, C, R), dtype),
    ):
        # Grid (more tiles, fewer tiles, B): the longer tile axis goes to gridDim.x (up to
        # 2**31 - 1); the shorter one has < 725 tiles because R * C < 2**31, which keeps it
        # inside gridDim.y's 65535. B (gridDim.z) above 65535 is split by the caller. Tiles
        # are wider on the 16-byte path, so the column tile count depends on the path.
        aligned = T.And(R % v == 0, C % v == 0)
        tiles_c = T.Select(aligned, T.ceildiv(C, tc_vec), T.ceildiv(C, tc_scalar))
        grid_x = T.max(tiles_r, tiles_c)
        grid_y = T.min(tiles_r, tiles_c)
        with T.Kernel(grid_x, grid_y, B, threads=threads) as (bx, by, b):
            s = T.alloc_shared((max(tc_vec, tc_scalar) * tr,), dtype)  # transposed tile, swizzled
            reg = T.alloc_local((max(LOADS, SCALAR_LOADS), v), dtype)
            tx = T.get_thread_binding()
            if (R % v == 0) & (C % v == 0):
                T.assume(R % v == 0)
                T.assume(C % v == 0)
                vector_tile(x, y, s, reg, b, bx, by, tx)
            else:
                scalar_tile(x, y, s, reg, b, bx, by, tx)

    return transpose


def place(q, chunks: int):
    """(row, 16-byte chunk) of the x tile that vector ``q = i * threads + tx`` moves, for tile
    rows of ``chunks`` vectors (a multiple of 8): each 32 consecutive vectors — one warp —
    cover 4 rows x 8 chunks (one 128-byte line per row), the next 32 the next 8 chunks of those
    rows, then the next 4 rows. Plain arithmetic: works on ints and on TIR expressions."""
    lane, group = q % 32, q // 32
    halves = chunks // 8
    return group // halves * 4 + lane // 8, group % halves * 8 + lane % 8


def reference(x):
    """torch reference: the contiguous transpose of the last two dims (exact)."""
    return x.transpose(-1, -2).contiguous()


SPEC = KernelSpec(
    op="transpose",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="y[b, c, r] = x[b, r, c]: contiguous transpose of the last two dims, bit-exact.",
)
