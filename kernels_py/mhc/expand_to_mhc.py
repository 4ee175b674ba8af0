"""Expansion of a hidden state into the mHC residual streams, forward: ``out[t, r, :] = x[t, :]``.

TileKernels' ``expand_to_mhc`` (`tile-kernels` 1.0.0: reference
``tile_kernels.torch.mhc.expand_to_mhc_ref``, kernel ``tile_kernels/mhc/expand_kernel.py``):
``x[T, H]`` bf16 becomes ``out[T, R, H]`` bf16 holding ``R = mhc_mult`` copies of each row. A
copy: bit-exact.

Memory-bound (one read of x, R writes of it). A block of 128 threads owns ``ROWS`` rows x one
column tile of ``128 * 8`` elements; each thread loads its 16-byte vector of each of the
``ROWS`` rows (all loads issued first), then stores each vector R times with one explicit
16-byte store (``st.global.v4``: TileLang's plain vector store came out of NVRTC 12.9 as four
4-byte stores for some vectors, see docs/ADDING_AN_OP.md). The grid is
``ceil(T / ROWS) x ceil(H / 1024)``. R and H are runtime sizes (one generic variant); a
runtime branch takes 16-byte accesses when ``H % 8 == 0`` (every row then starts 16-byte
aligned) and element accesses otherwise, so any H works. Written per thread, without
T.Parallel over fragments (fast to trace, bench/results/build-2026-12-02-tracing.md).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec

THREADS = 128
VEC = 8  # bf16 elements per 16-byte vector
COLS = THREADS * VEC  # columns per block
ROWS = 4  # rows per block: ROWS 16-byte loads in flight per thread


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(x[M, H], out[M, R, H])``. ``arch`` does not change the code."""
    if dtype != "bfloat16":
        raise ValueError(f"expand_to_mhc: unsupported dtype {dtype!r}")
    import tilelang.language as T

    M, R, H = T.dynamic("M"), T.dynamic("R"), T.dynamic("H")
    tile = Tile(T, M, H)

    @T.prim_func
    def expand_to_mhc(
        hidden: T.Tensor((M, H), "bfloat16"),
        out: T.Tensor((M, R, H), "bfloat16"),
    ):
        with T.Kernel(ceildiv(T, M, ROWS), ceildiv(T, H, COLS), threads=THREADS) as (bm, bc):
            tx = T.get_thread_binding()
            v = T.alloc_local((ROWS, VEC), "bfloat16")
            bits = T.view(v, (ROWS * 4,), "uint32")  # v as 4-byte words, for the stores
            if H % VEC == 0:
                T.assume(H % VEC == 0)  # rows start 16-byte aligned: vector accesses
                for r in T.unroll(ROWS):
                    for e in T.vectorized(VEC):
                        v[r, e] = T.if_then_else(
                            tile.whole(bm, bc, tx, r),
                            hidden[bm * ROWS + r, tile.col(bc, tx) + e],
                            T.bfloat16(0),
                        )
                for r in T.unroll(ROWS):
                    if tile.whole(bm, bc, tx, r):
                        for m in T.serial(R):
                            T.stg128(
                                out[bm * ROWS + r, m, tile.col(bc, tx)],
                                bits.vload([r * 4], "uint32x4"),
                            )
            else:
                for r in T.unroll(ROWS):
                    for e in T.unroll(VEC):
                        if tile.inside(bm, bc, tx, r, e):
                            v[r, e] = hidden[bm * ROWS + r, tile.col(bc, tx) + e]
                for r in T.unroll(ROWS):
                    for m in T.serial(R):
                        for e in T.unroll(VEC):
                            if tile.inside(bm, bc, tx, r, e):
                                out[bm * ROWS + r, m, tile.col(bc, tx) + e] = v[r, e]

    return expand_to_mhc


class Tile:
    """Index helpers of the ROWS x COLS tile (shared with the backward kernel): thread ``tx``
    of block ``(bm, bc)`` owns elements ``col .. col + VEC - 1`` of rows ``bm * ROWS + r``."""

    def __init__(self, T, M, H):
        self.T, self.M, self.H = T, M, H

    @staticmethod
    def col(bc, tx):
        return bc * COLS + tx * VEC

    def whole(self, bm, bc, tx, r):
        """The thread's vector of row r exists (H % VEC == 0: its last element decides)."""
        return (bm * ROWS + r < self.M) & (self.col(bc, tx) + VEC - 1 < self.H)

    def inside(self, bm, bc, tx, r, e):
        return (bm * ROWS + r < self.M) & (self.col(bc, tx) + e < self.H)


def reference(x, mhc_mult: int = 4):
    """torch reference: ``mhc_mult`` copies of each row, ``[..., H] -> [..., mhc_mult, H]``."""
    return x.unsqueeze(-2).expand(*x.shape[:-1], mhc_mult, x.shape[-1]).contiguous()


SPEC = KernelSpec(
    op="expand_to_mhc",
    factory=factory,
    keys=({"dtype": "bfloat16"},),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="mHC expand: R copies of each row, [T, H] -> [T, R, H] (bf16, bit-exact).",
)
