"""MoE combine: sum each token's expert outputs back into its row (op "moe_reduce").

::

    out[t, :] = sum_j  weights[t, j] * y_sorted[token_pos[t, j], :]     ("weighted")
    out[t, :] = sum_j  y_sorted[token_pos[t, j], :]                     ("sum")

over the slots j with ``0 <= token_pos[t, j] < P`` (-1 marks a dropped slot; any other value
outside the rows of ``y_sorted`` is skipped too, never read). Accumulation is fp32 in slot
order, as TileKernels' ``reduce_fused``: a weighted slot is one fused multiply-add
``acc = fma(y, w, acc)`` (rounded once), an unweighted one an add; the result is rounded once
to the output dtype; a token with no live slot gets zeros. ``token_pos`` is what
``moe_expand`` returns.

One block per (token, chunk of its row), 128 threads. The token's positions and weights are
staged in shared memory (128 slots per round, one load each, all in flight together). Each
thread owns ``U`` runs of ``V`` columns (``V = 16 / min(itemsize)``: whole 16-byte vectors of
both dtypes) in fp32 registers and walks the slots in pairs, issuing both rows' 16-byte loads
before accumulating either; then it writes its columns once (on CUDA targets one explicit
16-byte store per vector). Each needed row of ``y_sorted`` is read once and ``out`` written
once: bandwidth-bound.

Two kernels: the 16-byte one (``H % V == 0``) and a scalar one for rows that break 16-byte
alignment; each has a grid that is empty unless its case applies (``T.Select`` on ``H % V``),
the launcher skips the empty one, and each gets its own register allocation.

Loops over global memory are ``T.vectorized`` runs of at most 16 bytes: TileLang 0.1.15 would
otherwise emit 32-byte accesses on sm_100a (32-byte alignment needed).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..spec import ALL_CUDA_SAME, SPLIT_AT_SM100, KernelSpec

DTYPES = ("bfloat16", "float32")
ITEMSIZE = {"bfloat16": 2, "float32": 4}
MODES = ("weighted", "sum")

THREADS = 128
ACC_PER_THREAD = 32  # vector kernel: fp32 accumulators per thread, U * V
SCALAR_PER_THREAD = 8  # scalar kernel (rows not 16-byte aligned): columns per thread


def factory(arch: str, dtype: str, out_dtype: str, mode: str):
    """TileLang prim_func ``(y_sorted[P, H], token_pos[T, K] int32, [weights[T, K] fp32,]
    out[T, H])``; weights only in the "weighted" mode. ``arch`` only decides whether the
    16-byte stores are explicit (inline PTX: CUDA targets)."""
    if dtype not in DTYPES or out_dtype not in DTYPES or mode not in MODES:
        raise ValueError(f"moe_reduce: unsupported key {dtype!r}, {out_dtype!r}, {mode!r}")
    return _build(dtype, out_dtype, mode == "weighted", arch.startswith("sm_"))


def _build(dtype: str, out_dtype: str, weighted: bool, cuda: bool):
    import tilelang.language as T

    isz, osz = ITEMSIZE[dtype], ITEMSIZE[out_dtype]
    V = 16 // min(isz, osz)  # columns per run: whole 16-byte vectors of both dtypes
    U = ACC_PER_THREAD // V  # runs per thread
    Tn = T.dynamic("T")
    H = T.dynamic("H")
    K = T.dynamic("K")
    P = T.dynamic("P")
    vec_chunk = THREADS * V * U
    scalar_chunk = THREADS * SCALAR_PER_THREAD
    vec_body = _chunk_reduce(T, H, K, P, V, U, dtype, out_dtype, weighted, cuda)
    scalar_body = _chunk_reduce(T, H, K, P, 1, SCALAR_PER_THREAD, dtype, out_dtype, weighted)
    # Two kernels, one per access width; the grid of the one that does not apply is empty
    # (the launcher skips it), so each gets its own register allocation.
    vec_blocks = T.Select(H % V == 0, T.ceildiv(H, vec_chunk), 0)
    scalar_blocks = T.Select(H % V == 0, 0, T.ceildiv(H, scalar_chunk))

    @T.macro
    def reduce_rows(y, pos, w, out):
        with T.Kernel(Tn, vec_blocks, threads=THREADS) as (t, c):
            tx = T.get_thread_binding()
            if H % V == 0:  # always true where this grid is not empty
                T.assume(H % V == 0)  # rows start 16-byte aligned in y and out
                vec_body(y, pos, w, out, t, c, tx)
        with T.Kernel(Tn, scalar_blocks, threads=THREADS) as (t, c):
            tx = T.get_thread_binding()
            scalar_body(y, pos, w, out, t, c, tx)

    if weighted:

        @T.prim_func
        def moe_reduce(
            y_sorted: T.Tensor((P, H), dtype),
            token_pos: T.Tensor((Tn, K), "int32"),
            weights: T.Tensor((Tn, K), "float32"),
            out: T.Tensor((Tn, H), out_dtype),
        ):
            reduce_rows(y_sorted, token_pos, weights, out)

        return moe_reduce

    @T.prim_func
    def moe_reduce(
        y_sorted: T.Tensor((P, H), dtype),
        token_pos: T.Tensor((Tn, K), "int32"),
        out: T.Tensor((Tn, H), out_dtype),
    ):
        reduce_rows(y_sorted, token_pos, None, out)

    return moe_reduce


def _chunk_reduce(
    T, H, K, P, vec: int, unroll: int, dtype: str, out_dtype: str, weighted: bool, cuda=False
):
    """Macro reducing one chunk (``THREADS * unroll * vec`` columns) of token t's output row.

    The token's positions (and weights) are staged through shared memory, ``THREADS`` slots at
    a time (one load each, all in flight at once), so the slot loop never waits on them. Slots
    go in pairs: both rows' loads are issued before either is accumulated (more bytes in
    flight per thread), and accumulation stays in slot order. Loads move ``16 // itemsize``
    elements at a time, stores ``16 // out itemsize``: no access is wider than 16 bytes.
    """
    chunk = THREADS * vec * unroll
    load_w = max(1, min(vec, 16 // ITEMSIZE[dtype]))
    store_w = max(1, min(vec, 16 // ITEMSIZE[out_dtype]))
    n = unroll * vec  # columns per thread
    # Whole 16-byte output vectors leave in one explicit st.global.v4 each: TileLang's
    # `*(uint4*)(out + ...) = ...` came out of NVRTC 12.9 (sm_90a) with one of a thread's
    # vectors as four 4-byte STGs, in both output dtypes (cuobjdump; docs/ADDING_AN_OP.md).
    store_128 = cuda and store_w * ITEMSIZE[out_dtype] == 16
    # The weighted slot is one explicit fused multiply-add (round once), not a multiply and
    # an add left to the compiler's contraction: __fmaf_rn on CUDA, fma elsewhere.
    fma = T.ieee_fmaf if cuda else T.fma
    # TileLang does not vectorize a loop of FMA calls (it warns and emits a plain loop):
    # unroll it instead; register arithmetic compiles to the same SASS either way.
    vec_loop = T.unroll if weighted else T.vectorized

    @T.macro
    def load_row(buf, y, p, c, tx):
        if (p >= 0) & (p < P):
            for u in T.unroll(unroll):
                col = c * chunk + (u * THREADS + tx) * vec
                if col < H:
                    for h in T.unroll(vec // load_w):
                        for v in T.vectorized(load_w):
                            buf[u * vec + h * load_w + v] = y[p, col + h * load_w + v]

    @T.macro
    def accumulate(acc, buf, p, scale, c, tx):
        if (p >= 0) & (p < P):
            for u in T.unroll(unroll):
                if c * chunk + (u * THREADS + tx) * vec < H:
                    for v in vec_loop(vec):
                        if weighted:  # one FMA, as TileKernels' reduce_fused
                            acc[u * vec + v] = fma(
                                T.cast(buf[u * vec + v], "float32"), scale, acc[u * vec + v]
                            )
                        else:
                            acc[u * vec + v] += T.cast(buf[u * vec + v], "float32")

    @T.macro
    def reduce_chunk(y, pos, w, out, t, c, tx):
        acc = T.alloc_local((n,), "float32")
        rows_a = T.alloc_local((n,), dtype)
        rows_b = T.alloc_local((n,), dtype)
        tile_pos = T.alloc_shared((THREADS,), "int32")
        tile_w = T.alloc_shared((THREADS,), "float32")
        T.clear(acc)
        for kt in T.serial(T.ceildiv(K, THREADS)):
            # Stage up to THREADS slots; entries past K read as -1 (the odd slot of a last pair).
            j = kt * THREADS + tx
            tile_pos[tx] = T.if_then_else(j < K, pos[t, j], -1)
            if weighted:
                tile_w[tx] = T.if_then_else(j < K, w[t, j], T.float32(0))
            for s in T.serial(T.ceildiv(T.min(K - kt * THREADS, THREADS), 2)):
                pa = T.alloc_var("int32", init=tile_pos[2 * s])
                pb = T.alloc_var("int32", init=tile_pos[2 * s + 1])
                load_row(rows_a, y, pa, c, tx)
                load_row(rows_b, y, pb, c, tx)
                accumulate(acc, rows_a, pa, tile_w[2 * s], c, tx)
                accumulate(acc, rows_b, pb, tile_w[2 * s + 1], c, tx)
        if store_128:
            ob = T.alloc_local((store_w,), out_dtype)  # one rounded output vector: 16 bytes
            ob_bits = T.view(ob, (4,), "uint32")
        for u in T.unroll(unroll):
            col = c * chunk + (u * THREADS + tx) * vec
            if col < H:
                for h in T.unroll(vec // store_w):
                    if store_128:
                        for v in T.vectorized(store_w):
                            ob[v] = T.cast(acc[u * vec + h * store_w + v], out_dtype)
                        T.stg128(out[t, col + h * store_w], ob_bits.vload([0], "uint32x4"))
                    else:
                        for v in T.vectorized(store_w):
                            out[t, col + h * store_w + v] = T.cast(
                                acc[u * vec + h * store_w + v], out_dtype
                            )

    return reduce_chunk


def fma_f32(a, b, c):
    """float32 ``a * b + c`` with one rounding (what CUDA's fmaf computes), on any device.

    ``a * b`` is exact in float64 (24-bit significands); the sum is then rounded to odd
    (rounded to nearest, then moved to the odd neighbour on the side of its error when
    inexact and even), so the final rounding to float32 is the correctly rounded result
    (float64 keeps more than 24 + 1 bits: no double rounding).
    """
    import torch

    s = a.double() * b.double()
    c = c.double()
    t = s + c
    bp = t - s
    err = (s - (t - bp)) + (c - bp)  # t + err = s + c exactly (TwoSum), NaN at inf
    even = (t.view(torch.int64) & 1) == 0
    inexact = (err != 0) & torch.isfinite(err)
    toward = torch.where(
        err > 0, torch.full_like(t, float("inf")), torch.full_like(t, -float("inf"))
    )
    t = torch.where(inexact & even, torch.nextafter(t, toward), t)
    return t.float()


def reference(y_sorted, token_pos, weights=None, out_dtype=None):
    """torch reference: fp32 accumulation in slot order, one rounding to ``out_dtype``
    (default: y's dtype). Slots with ``token_pos`` outside ``[0, P)`` are skipped.

    A weighted slot is one fused multiply-add, ``acc = fma(y, w, acc)`` rounded once (as
    TileKernels' ``reduce_fused`` accumulates); an unweighted one is ``acc + y``.
    """
    import torch

    t, k = token_pos.shape
    rows = y_sorted.shape[0]
    acc = torch.zeros(t, y_sorted.shape[1], dtype=torch.float32, device=y_sorted.device)
    for j in range(k):
        p = token_pos[:, j].long()
        live = (p >= 0) & (p < rows)
        term = y_sorted[p.clamp(0, max(rows - 1, 0))].float() if rows else acc
        if weights is not None:
            new = fma_f32(term, weights[:, j, None].float().expand_as(term), acc)
        else:
            new = acc + term
        acc = torch.where(live[:, None], new, acc)
    return acc.to(out_dtype or y_sorted.dtype)


def _lowering_classes(key, spec):
    """TileLang 0.1.15 packs the sum mode's plain fp32 vector adds into tl::add2 from sm_100
    on; the weighted mode's multiply-adds it leaves alone, so they lower alike everywhere."""
    return SPLIT_AT_SM100 if key["mode"] == "sum" else ALL_CUDA_SAME


SPEC = KernelSpec(
    op="moe_reduce",
    factory=factory,
    keys=tuple(
        {"dtype": d, "out_dtype": o, "mode": m} for d in DTYPES for o in DTYPES for m in MODES
    ),
    specs=({},),
    reference=reference,
    lowering_classes=_lowering_classes,
    lowering_reason="per-thread code; the sum mode's fp32 adds are packed in pairs from sm_100",
    doc="out[t] = sum_j weights[t, j] * y_sorted[token_pos[t, j]] (fp32 accumulation), "
    "token_pos -1 skipped; weighted or plain sum; bf16/fp32 in and out.",
)
