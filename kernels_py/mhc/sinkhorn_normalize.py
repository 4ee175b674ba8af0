"""Sinkhorn normalisation of small square matrices (the mHC mixing matrices), forward.

TileKernels' algorithm (`tile-kernels` 1.0.0: `tile_kernels.torch.mhc.sinkhorn_normalize_ref`,
the kernel behind `tile_kernels.modeling.mhc.ops.sinkhorn_normalize`). For each matrix
``L = logits[t]`` (``N x N``, float32), with runtime ``repeat >= 1`` and ``eps >= 0``, this
sequence in float32::

    P = softmax(L, dim=-1) + eps                       # row softmax (max-subtracted), + eps
    P = P / (P.sum(dim=-2, keepdim=True) + eps)        # columns
    for _ in range(repeat - 1):
        P = P / (P.sum(dim=-1, keepdim=True) + eps)    # rows
        P = P / (P.sum(dim=-2, keepdim=True) + eps)    # columns
    out[t] = P

so ``repeat`` counts column normalisations and the last step normalises columns.

Layout: one matrix per group of ``G`` lanes, one row per lane, everything in registers
(``G = N`` for the specialised N = 4 and N = 8; ``G = 16`` for the generic variant, any
``N <= 16``, lanes and columns past N masked to 0). A row sum is a per-lane sum; a column sum is
a butterfly of ``log2(G)`` XOR shuffles inside the group. Each lane reads its row of ``L``
(16 bytes for N = 4: a warp reads 512 contiguous bytes) and writes its row of the result: one
read and one write of the data, so the kernel is latency- and arithmetic-bound; 128 threads per
block, ``128 / G`` matrices per block, ``ceil(T / (128 / G))`` blocks.

Division is a correctly rounded reciprocal (``__frcp_rn``) per sum and a multiply per element,
and ``exp`` is CUDA's ``expf``: results differ from the float64 reference by a few float32 ulps
(see the GPU tests for the bound; TileKernels' own test compares with torch's default float32
``assert_close`` tolerances). Inactive lanes (past T, or past N in the generic variant) run the
same instructions on zeros so that every shuffle has all its lanes; they store nothing.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
import math

from ..spec import ALL_CUDA_SAME, KernelSpec

THREADS = 128
STATIC_N = (4, 8)
MAX_N = 16  # the generic variant serves any N <= MAX_N (MAX_N lanes per matrix)


def lanes(n: int | None) -> int:
    """Lanes per matrix: N itself when static (4, 8), MAX_N for the generic variant."""
    return MAX_N if n is None else n


def factory(arch: str, dtype: str, N: int | None = None):
    """TileLang prim_func ``(logits[M, N, N], out[M, N, N], repeat: int32, eps: float32)``.

    ``arch`` does not change the code.
    """
    if dtype != "float32":
        raise ValueError(f"sinkhorn_normalize: unsupported dtype {dtype!r}")
    if N is not None and N not in STATIC_N:
        raise ValueError(f"sinkhorn_normalize: no static variant for N={N}; use the generic one")
    import tilelang.language as T

    g = lanes(N)
    ops = RowOps(T, g, N)
    M = T.dynamic("M")
    NN = T.dynamic("N") if N is None else N
    per_block = THREADS // g

    @T.prim_func
    def sinkhorn_normalize(
        logits: T.Tensor((M, NN, NN), "float32"),
        out: T.Tensor((M, NN, NN), "float32"),
        repeat: T.int32,
        eps: T.float32,
    ):
        with T.Kernel(T.ceildiv(M, per_block), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            m = bx * per_block + tx // g
            i = tx % g
            p = T.alloc_local((g,), "float32")
            rc = T.alloc_local((g,), "float32")
            rr = T.alloc_local((1,), "float32")
            ops.load_softmax(logits, p, m, i, M, NN)
            ops.add_eps(p, i, eps, NN)
            ops.col_step(p, rc, i, eps, NN)
            for _ in T.serial(repeat - 1):
                ops.row_step(p, rr, i, eps, NN)
                ops.col_step(p, rc, i, eps, NN)
            ops.store(out, p, m, i, M, NN)

    return sinkhorn_normalize


class RowOps:
    """The per-lane building blocks (TileLang macros), shared with the backward kernel.

    ``p`` is a lane's row (``g`` registers). ``n`` is the static N or None (generic: masks
    apply, ``N`` is the dynamic size passed to each macro).
    """

    def __init__(self, T, g: int, n: int | None):
        self.T, self.g, self.generic = T, g, n is None
        self.log2g = int(math.log2(g))
        assert 1 << self.log2g == g
        self.load_softmax = self._load_softmax()
        self.add_eps = self._add_eps()
        self.col_step = self._col_step()
        self.row_step = self._row_step()
        self.store = self._store()
        self.load_row = self._load_row()
        self.col_sum = self._col_sum()

    def keep(self, ok, value):
        """``value`` where the entry exists, 0 elsewhere (generic variant only)."""
        T = self.T
        return T.if_then_else(ok, value, T.float32(0)) if self.generic else value

    def _load_row(self):
        """Macro: ``p = src[m, i, :]`` (zeros for inactive lanes); 16-byte loads when static."""
        T, g, generic = self.T, self.g, self.generic

        @T.macro
        def load_row(src, p, m, i, M, N, fill):
            if generic:
                for j in T.unroll(g):
                    p[j] = T.if_then_else(
                        (i < N) & (j < N), T.if_then_else(m < M, src[m, i, j], 0.0), fill
                    )
            else:
                if m < M:
                    for c in T.unroll(g // 4):
                        for k in T.vectorized(4):
                            p[c * 4 + k] = src[m, i, c * 4 + k]
                else:
                    for j in T.unroll(g):
                        p[j] = T.float32(0)

        return load_row

    def _load_softmax(self):
        T, g = self.T, self.g
        load_row = self._load_row()

        @T.macro
        def load_softmax(src, p, m, i, M, N):
            # Entries past N load as -inf: exp() makes them 0; whole padding rows give NaN,
            # masked to 0 by keep().
            load_row(src, p, m, i, M, N, -T.infinity("float32"))
            mx = T.alloc_local((1,), "float32")
            mx[0] = p[0]
            for j in T.unroll(1, g):
                mx[0] = T.max(mx[0], p[j])
            s = T.alloc_local((1,), "float32")
            s[0] = T.float32(0)
            for j in T.unroll(g):
                p[j] = self.keep((i < N) & (j < N), T.exp(p[j] - mx[0]))
                s[0] = s[0] + p[j]
            s[0] = T.ieee_frcp(s[0])
            for j in T.unroll(g):
                p[j] = self.keep((i < N) & (j < N), p[j] * s[0])

        return load_softmax

    def _add_eps(self):
        """Macro: ``p += eps`` on the entries that exist (padding stays 0)."""
        T, g = self.T, self.g

        @T.macro
        def add_eps(p, i, eps, N):
            for j in T.unroll(g):
                p[j] = self.keep((i < N) & (j < N), p[j] + eps)

        return add_eps

    def _col_sum(self):
        """Macro: ``out[j] = sum over the group's lanes of v[j]`` (XOR butterfly)."""
        T, g, log2g = self.T, self.g, self.log2g

        @T.macro
        def col_sum(v, out):
            for j in T.unroll(g):
                out[j] = v[j]
                for s in T.unroll(log2g):
                    out[j] = out[j] + T.shfl_xor(out[j], T.shift_left(1, s))

        return col_sum

    def _col_step(self):
        """Macro: ``p /= colsum(p) + eps``; leaves the reciprocals in ``rc``."""
        T, g = self.T, self.g
        col_sum = self._col_sum()

        @T.macro
        def col_step(p, rc, i, eps, N):
            col_sum(p, rc)
            for j in T.unroll(g):
                rc[j] = T.ieee_frcp(rc[j] + eps)
                p[j] = self.keep((i < N) & (j < N), p[j] * rc[j])

        return col_step

    def _row_step(self):
        """Macro: ``p /= rowsum(p) + eps``; leaves the reciprocal in ``rr[0]``."""
        T, g = self.T, self.g

        @T.macro
        def row_step(p, rr, i, eps, N):
            rr[0] = p[0]
            for j in T.unroll(1, g):
                rr[0] = rr[0] + p[j]
            rr[0] = T.ieee_frcp(rr[0] + eps)
            for j in T.unroll(g):
                p[j] = self.keep((i < N) & (j < N), p[j] * rr[0])

        return row_step

    def _store(self):
        """Macro: ``dst[m, i, :] = p`` for active lanes; 16-byte stores when static."""
        T, g, generic = self.T, self.g, self.generic

        @T.macro
        def store(dst, p, m, i, M, N):
            if generic:
                for j in T.unroll(g):
                    if (m < M) & (i < N) & (j < N):
                        dst[m, i, j] = p[j]
            else:
                if m < M:
                    for c in T.unroll(g // 4):
                        for k in T.vectorized(4):
                            dst[m, i, c * 4 + k] = p[c * 4 + k]

        return store


def sinkhorn(logits, repeat: int, eps: float):
    """The documented sequence in torch, in the dtype of `logits` (differentiable)."""
    import torch

    if repeat < 1:
        raise ValueError(f"sinkhorn: repeat must be >= 1; got {repeat}")
    p = torch.softmax(logits, dim=-1) + eps
    p = p / (p.sum(dim=-2, keepdim=True) + eps)
    for _ in range(repeat - 1):
        p = p / (p.sum(dim=-1, keepdim=True) + eps)
        p = p / (p.sum(dim=-2, keepdim=True) + eps)
    return p


def reference(logits, repeat: int = 10, eps: float = 1e-6):
    """torch reference computed in float64, returned as float32."""
    import torch

    return sinkhorn(logits.double(), repeat, eps).to(torch.float32)


SPEC = KernelSpec(
    op="sinkhorn_normalize",
    factory=factory,
    keys=({"dtype": "float32"},),
    specs=({}, *({"N": n} for n in STATIC_N)),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="TileKernels' sinkhorn: softmax rows + eps, columns, then (rows, columns) x (repeat - 1); "
    "[T, N, N].",
)
