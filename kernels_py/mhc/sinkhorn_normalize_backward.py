"""Sinkhorn normalisation, backward: ``grad_logits`` from ``grad_out`` (see sinkhorn_normalize.py).

TileKernels' algorithm (its backward kernel keeps every intermediate in shared memory; this one
recomputes them). Nothing is saved by the forward. Per matrix (one row per lane, as in the
forward), with ``P0 = softmax(L)``, ``X_1 = colnorm(P0 + eps)`` and ``X_r`` the state before
pair ``r`` (a row step, then a column step; ``repeat - 1`` pairs)::

    row step:  d_i = 1 / (sum_j X_ij + eps),   Y = X * d
    col step:  c_j = 1 / (sum_i Y_ij + eps),   Z = Y * c
    backward:  dY = c * (G - colsum(G * Z))            (G = dL/dZ)
               dX = d * (dY - rowsum(dY * Y))
    first col step (A = P0 + eps, X_1 = A * c0):  dA = c0 * (G - colsum(G * X_1))
    + eps: identity;  softmax:  dL = P0 * (dA - rowsum(dA * P0))

Pairs are processed in segments of ``S`` (64 registers per lane of checkpoints: S = 16 pairs
for N = 4, 8 for N = 8, 4 for the generic N <= 16), last segment first. For each segment the
forward is recomputed from ``P0`` (kept in registers) up to the segment's start (runtime loop),
then through the segment storing each ``X_r`` in registers (unrolled, compile-time indices),
then the segment is back-propagated pair by pair, each pair's ``d``, ``Y``, ``c``, ``Z``
recomputed from its checkpoint with the forward's own instructions (bit-identical states).
Cost: about ``2 * repeat + repeat**2 / (2 * S)`` pair evaluations, e.g. 56 for repeat = 20 and
N = 4 (the forward: 20); any ``repeat`` works, nothing is capped.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .sinkhorn_normalize import STATIC_N, THREADS, RowOps, lanes, sinkhorn

CKPT_REGS = 64  # checkpoint registers per lane; S = CKPT_REGS // lanes pairs per segment


def segment(n: int | None) -> int:
    """Pairs per checkpoint segment for a static N (None: generic)."""
    return CKPT_REGS // lanes(n)


def factory(arch: str, dtype: str, N: int | None = None):
    """TileLang prim_func ``(grad_out[M, N, N], logits[M, N, N], grad_logits[M, N, N],
    repeat: int32, eps: float32)``. ``arch`` does not change the code."""
    if dtype != "float32":
        raise ValueError(f"sinkhorn_normalize_backward: unsupported dtype {dtype!r}")
    if N is not None and N not in STATIC_N:
        raise ValueError(f"sinkhorn_normalize_backward: no static variant for N={N}")
    import tilelang.language as T

    g = lanes(N)
    seg = segment(N)
    ops = RowOps(T, g, N)
    M = T.dynamic("M")
    NN = T.dynamic("N") if N is None else N
    per_block = THREADS // g

    @T.macro
    def col_back(gr, z, rc, dot, i, N):
        """``gr = rc * (gr - colsum(gr * z))``, ``z`` the column step's output (clobbered)."""
        for j in T.unroll(g):
            z[j] = gr[j] * z[j]
        ops.col_sum(z, dot)
        for j in T.unroll(g):
            gr[j] = ops.keep((i < N) & (j < N), (gr[j] - dot[j]) * rc[j])

    @T.prim_func
    def sinkhorn_normalize_backward(
        grad_out: T.Tensor((M, NN, NN), "float32"),
        logits: T.Tensor((M, NN, NN), "float32"),
        grad_logits: T.Tensor((M, NN, NN), "float32"),
        repeat: T.int32,
        eps: T.float32,
    ):
        with T.Kernel(ceildiv(T, M, per_block), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            m = bx * per_block + tx // g
            i = tx % g
            p0 = T.alloc_local((g,), "float32")  # softmax(L)
            gr = T.alloc_local((g,), "float32")  # the running gradient
            x = T.alloc_local((g,), "float32")  # the state
            y = T.alloc_local((g,), "float32")  # a row step's output
            rc = T.alloc_local((g,), "float32")
            rr = T.alloc_local((1,), "float32")
            dot = T.alloc_local((g,), "float32")
            ckpt = T.alloc_local((seg, g), "float32")
            ops.load_softmax(logits, p0, m, i, M, NN)
            ops.load_row(grad_out, gr, m, i, M, NN, 0.0)
            pairs = repeat - 1
            segments = T.ceildiv(pairs, seg)
            for sg in T.serial(segments):
                lo = (segments - 1 - sg) * seg
                for j in T.unroll(g):
                    x[j] = p0[j]
                ops.add_eps(x, i, eps, NN)
                ops.col_step(x, rc, i, eps, NN)
                for _ in T.serial(lo):
                    ops.row_step(x, rr, i, eps, NN)
                    ops.col_step(x, rc, i, eps, NN)
                for r in T.unroll(seg):
                    if lo + r < pairs:
                        for j in T.unroll(g):
                            ckpt[r, j] = x[j]
                        ops.row_step(x, rr, i, eps, NN)
                        ops.col_step(x, rc, i, eps, NN)
                for rb in T.unroll(seg):
                    if lo + (seg - 1 - rb) < pairs:
                        for j in T.unroll(g):
                            x[j] = ckpt[seg - 1 - rb, j]
                        ops.row_step(x, rr, i, eps, NN)
                        for j in T.unroll(g):
                            y[j] = x[j]
                        ops.col_step(x, rc, i, eps, NN)
                        # Column step: dY = c * (G - colsum(G * Z)); x holds Z.
                        col_back(gr, x, rc, dot, i, NN)
                        # Row step: dX = d * (dY - rowsum(dY * Y)).
                        dot[0] = gr[0] * y[0]
                        for j in T.unroll(1, g):
                            dot[0] = dot[0] + gr[j] * y[j]
                        for j in T.unroll(g):
                            gr[j] = ops.keep((i < NN) & (j < NN), (gr[j] - dot[0]) * rr[0])
            # The first column step (of A = P0 + eps); the + eps passes the gradient through.
            for j in T.unroll(g):
                x[j] = p0[j]
            ops.add_eps(x, i, eps, NN)
            ops.col_step(x, rc, i, eps, NN)
            col_back(gr, x, rc, dot, i, NN)
            # Softmax: dL = P0 * (G - rowsum(G * P0)).
            dot[0] = gr[0] * p0[0]
            for j in T.unroll(1, g):
                dot[0] = dot[0] + gr[j] * p0[j]
            for j in T.unroll(g):
                gr[j] = p0[j] * (gr[j] - dot[0])
            ops.store(grad_logits, gr, m, i, M, NN)

    return sinkhorn_normalize_backward


def reference(grad_out, logits, repeat: int = 10, eps: float = 1e-6):
    """torch reference: autograd of the float64 forward reference, returned as float32."""
    import torch

    with torch.enable_grad():
        x = logits.detach().double().requires_grad_(True)
        (grad,) = torch.autograd.grad(sinkhorn(x, repeat, eps), x, grad_out.double())
    return grad.to(torch.float32)


SPEC = KernelSpec(
    op="sinkhorn_normalize_backward",
    factory=factory,
    keys=({"dtype": "float32"},),
    specs=({}, *({"N": n} for n in STATIC_N)),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="grad_logits of sinkhorn_normalize (recomputed forward, checkpointed); [T, N, N].",
)
