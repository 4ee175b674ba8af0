"""Engram gate, backward: the gradients of ``out = h + g * v`` (see engram_gate.py).

TileKernels' semantics (`tile-kernels` 1.0.0: ``tile_kernels.engram.engram_gate_bwd`` and
``grad_w_reduce`` as ``tile_kernels.modeling.engram.EngramGateFn`` runs them, i.e. autograd of
``tile_kernels.torch.engram.engram_gate_ref``: per-branch weights, ``clamp_value``). Like
TileKernels' backward it reads the statistics its forward saved (engram_gate_save.py: the raw
``dot``, the gate ``g``, ``rh = rsqrt(mean(h^2) + eps)``, ``rk`` likewise; fp32 [M] each)
instead of recomputing them: a recomputation sums in another order, and near the clamp the
slope of sqrt(|s|) magnified that difference past TileKernels' test bound. Per row, with
``s = dot * rh * rk / sqrt(H)``, ``w_* = w_*[row % GW]`` its weight row and ``go`` the incoming
gradient (the closed forms ``reference`` evaluates)::

    dg     = <go, v>
    ds     = 0 if |s| < clamp, else dg * g * (1 - g) * 0.5 / sqrt(max(|s|, S_FLOOR))
    c      = ds / sqrt(H)
    alpha  = c * rh * rk,   beta_h = c * rh^2 * s / sqrt(H),   beta_k = c * rk^2 * s / sqrt(H)
    grad_v = g * go
    grad_h = go + alpha * k * w_h * w_k - beta_h * h
    grad_k =      alpha * h * w_h * w_k - beta_k * k
    P     += alpha * h * k                  (summed over the rows of each weight row)
    grad_w_h = w_k * P,   grad_w_k = w_h * P   ([GW, H])

v may be shared by runs of rows (``[MV, H]``, see engram_gate.py ``value_row``): ``dg`` reads
the row's v row, and ``grad_v`` stays per row of h (``[M, H]``, each row's ``g * go``); the
Python layer then forms the shared row's gradient from the saved gate in float32 (rounded once,
as TileKernels), not from these rounded terms.

Below ``clamp`` the gate is constant (``sqrt(clamp)`` with the sign of s), so ``ds = 0``, as in
TileKernels. With ``clamp < S_FLOOR`` (1e-6), where signed_sqrt's slope is unbounded near
s = 0, the slope is taken as ``0.5 / sqrt(max(|s|, S_FLOOR))`` (at most 500): finite gradients
for rows with tiny s, the same convention in ``reference`` (TileKernels' autograd would give
values up to infinity there; with its default clamp of 1e-6 the two agree everywhere).

The weight gradients are row reductions, done deterministically (no float atomics) by two
kernels in one launch sequence:

1. ``B`` thread blocks (``B`` = the first dim of the fp32 scratch ``partial[B, H]``, chosen by
   the caller: a few blocks per SM, a multiple of ``GW``) each own the rows of one weight row
   ``wb = b % GW``: rows ``b, b + B, b + 2B, ...`` (all ``wb`` modulo GW, as B is a multiple
   of GW: the tokens ``b // GW + i * (B / GW)``' rows of branch wb). Per row they read
   go, h, k, v and the row's statistics once, write grad_h, grad_k, grad_v, and add
   ``alpha * h * k`` into the block's running sum ``P_b``. Static H keeps go, h and k in
   registers (one HBM read per element; v is only needed for ``<go, v>`` and is streamed),
   ``w_h * w_k`` (fp32, loaded once per block) and ``P_b`` in shared memory. Generic H makes
   two passes over each row (the second hits L1/L2) and keeps ``P_b`` in its ``partial`` row
   (L2-resident read-modify-write). Each block finally owns ``partial[b, :]``.
2. A small kernel sums ``partial`` over the blocks ``b`` of each weight row per column, in a
   fixed order, and writes ``grad_w_h``, ``grad_w_k`` ``[GW, H]`` in float32 (TileKernels'
   ``grad_w_reduce`` accumulates into float32 gradients whatever the weights' dtype).

Loops touching global memory carry ``coalesced_width`` = one 16-byte vector (sm_100a, see
engram_gate.py). Base pointers must be 16-byte aligned. Access widths (bf16): go, h, k and
grad_v move in 16-byte vectors; TileLang 0.1.15 vectorises a loop that mixes fp32 math with a
non-register buffer (the shared ``w_h * w_k``, v's fp32 use) at 4 elements, so v's loads and
the grad_h / grad_k stores are 8 bytes wide (still whole 32-byte sectors per warp).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
import math

from ..spec import BY_GENERATION, KernelSpec
from .engram_gate import (
    DTYPES,
    ITEMSIZE,
    STATIC_H,
    chunk_layout,
    row_threads,
    value_row,
    weight_row,
)

S_FLOOR = 1e-6  # |s| floor in d signed_sqrt / ds

# Thread blocks per SM each static variant is compiled for (__launch_bounds__ minimum): the
# most that hold their rows in registers without (or, bf16 H=7168, with a few bytes of)
# spilling. The Python layer launches B = min(rows, SMs * this) blocks: one full wave.
BLOCKS_PER_SM = {
    ("bfloat16", 2048): 4,
    ("bfloat16", 4096): 2,
    ("bfloat16", 7168): 3,
    ("float32", 2048): 4,
    ("float32", 4096): 2,
    ("float32", 7168): 2,
}
GENERIC_BLOCKS_PER_SM = 4
GENERIC_THREADS = 256
SCALAR_PER_THREAD = 2  # elements per thread per chunk on the unaligned (H % vec != 0) path

# The reduction of the per-block sums: RED_GROUPS row groups x RED_COLS columns per block.
RED_THREADS = 256
RED_GROUPS = 32
RED_COLS = 32


def blocks_per_sm(dtype: str, H: int | None) -> int:
    """Blocks per SM the variant serving (dtype, H) is built for (the launch's B / SMs)."""
    return BLOCKS_PER_SM.get((dtype, H), GENERIC_BLOCKS_PER_SM)


def factory(arch: str, dtype: str, H: int | None = None):
    """TileLang prim_func ``(grad_out, h, k [M, H], v [MV, H], w_h, w_k [GW, H], dot, g,
    rstd_h, rstd_k [M] fp32 (the forward's saved statistics), grad_h, grad_k, grad_v [M, H],
    grad_w_h, grad_w_k [GW, H] fp32, partial [B, H] fp32, clamp)``; two kernels, run in
    order; B is a multiple of GW. ``grad_v`` is per row of h (summed per
    shared v row by the caller).

    The same code serves every CUDA arch, so ``arch`` only takes part in the interface.
    """
    if dtype not in DTYPES:
        raise ValueError(f"engram_gate_backward: unsupported dtype {dtype!r}")
    return _generic(dtype) if H is None else _static(dtype, H)


def slope(T, dg, g, s, clamp):
    """dL/ds = dL/dg * sigmoid' * d signed_sqrt/ds: 0 below `clamp`, floored (see the docstring)."""
    return T.if_then_else(
        T.abs(s) < clamp, 0.0, dg * g * (1.0 - g) * 0.5 * T.rsqrt(T.max(T.abs(s), S_FLOOR))
    )


def block_rows(T, b, M, B):
    """The number of rows of block `b`: rows ``b, b + B, b + 2B, ...`` below M (B is a
    multiple of GW, so they share the weight row ``b % GW``)."""
    return T.ceildiv(M - b, B)


def _static(dtype: str, n: int):
    import tilelang.language as T

    vec = 16 // ITEMSIZE[dtype]
    threads = row_threads(n, vec)
    L = threads * vec
    C = n // L
    width = T.int32(vec)
    inv_sqrt_n = 1.0 / math.sqrt(n)
    min_blocks = BLOCKS_PER_SM[(dtype, n)]
    M = T.dynamic("M")
    MV = T.dynamic("MV")
    GW = T.dynamic("GW")
    B = T.dynamic("B")
    reduce_partials = _reduce_kernel(T, n, B, GW)

    def f32(x):
        return T.cast(x, "float32")

    @T.prim_func
    def engram_gate_backward(
        grad_out: T.Tensor((M, n), dtype),
        h: T.Tensor((M, n), dtype),
        k: T.Tensor((M, n), dtype),
        v: T.Tensor((MV, n), dtype),
        w_h: T.Tensor((GW, n), dtype),
        w_k: T.Tensor((GW, n), dtype),
        dot: T.Tensor((M,), "float32"),
        gate: T.Tensor((M,), "float32"),
        rstd_h: T.Tensor((M,), "float32"),
        rstd_k: T.Tensor((M,), "float32"),
        grad_h: T.Tensor((M, n), dtype),
        grad_k: T.Tensor((M, n), dtype),
        grad_v: T.Tensor((M, n), dtype),
        grad_w_h: T.Tensor((GW, n), "float32"),
        grad_w_k: T.Tensor((GW, n), "float32"),
        partial: T.Tensor((B, n), "float32"),
        clamp: T.float32,
    ):
        with T.Kernel(B, threads=threads) as b:
            T.annotate_min_blocks_per_sm(min_blocks)
            gr = T.alloc_fragment((C, L), dtype)
            hr = T.alloc_fragment((C, L), dtype)
            kr = T.alloc_fragment((C, L), dtype)
            acc_g = T.alloc_fragment((L,), "float32")
            sum_g = T.alloc_fragment((1,), "float32")
            rh = T.alloc_fragment((1,), "float32")
            rk = T.alloc_fragment((1,), "float32")
            s = T.alloc_fragment((1,), "float32")
            g = T.alloc_fragment((1,), "float32")
            cs = T.alloc_fragment((1,), "float32")
            coef = T.alloc_fragment((1,), "float32")
            coef_h = T.alloc_fragment((1,), "float32")
            coef_k = T.alloc_fragment((1,), "float32")
            pacc = T.alloc_shared((C, L), "float32")
            wws = T.alloc_shared((C, L), "float32")
            wrow = T.alloc_var("int32", init=weight_row(T, b, GW))
            T.assume((0 <= wrow) & (wrow < GW))
            T.clear(pacc)
            for c, j in T.Parallel(C, L, coalesced_width=width):
                wws[c, j] = f32(w_h[wrow, c * L + j]) * f32(w_k[wrow, c * L + j])
            for i in T.serial(block_rows(T, b, M, B)):
                row = b + i * B
                vrow = T.alloc_var("int32", init=value_row(T, row, M, MV))
                T.assume((0 <= vrow) & (vrow < MV))
                for c, j in T.Parallel(C, L, coalesced_width=width):
                    gr[c, j] = grad_out[row, c * L + j]
                    hr[c, j] = h[row, c * L + j]
                    kr[c, j] = k[row, c * L + j]
                T.clear(acc_g)
                # dg = <go, v>: its own loop, v's row by case. Indexing v by h's row when v has
                # h's shape lets v share the other tensors' row offset: with one v address of
                # its own (vrow) the H=7168 bf16 variant spilled 4x more and ran 29 % slower.
                if MV == M:
                    T.assume(row < MV)
                    for c in T.unroll(C):
                        for j in T.Parallel(L, coalesced_width=width):
                            acc_g[j] += f32(gr[c, j]) * f32(v[row, c * L + j])
                else:
                    for c in T.unroll(C):
                        for j in T.Parallel(L, coalesced_width=width):
                            acc_g[j] += f32(gr[c, j]) * f32(v[vrow, c * L + j])
                T.reduce_sum(acc_g, sum_g, dim=0)
                # The forward's statistics as it saved them (TileKernels' backward forms the
                # scaled dot from the raw one the same way).
                rh[0] = rstd_h[row]
                rk[0] = rstd_k[row]
                g[0] = gate[row]
                s[0] = dot[row] * rh[0] * rk[0] * inv_sqrt_n
                cs[0] = slope(T, sum_g[0], g[0], s[0], clamp) * inv_sqrt_n  # c = dL/ds / sqrt(H)
                # alpha = c rh rk; beta_h = c rh^2 s / sqrt(H); beta_k = c rk^2 s / sqrt(H)
                coef[0] = cs[0] * rh[0] * rk[0]
                coef_h[0] = cs[0] * rh[0] * rh[0] * s[0] * inv_sqrt_n
                coef_k[0] = cs[0] * rk[0] * rk[0] * s[0] * inv_sqrt_n
                # Three loops: a loop mixing fp32 math with a non-register buffer (wws, pacc)
                # is vectorised at 4 elements, so grad_v gets its own 16-byte-store loop and
                # the shared-memory update its own loop.
                for c, j in T.Parallel(C, L, coalesced_width=width):
                    grad_h[row, c * L + j] = (
                        f32(gr[c, j])
                        + coef[0] * f32(kr[c, j]) * wws[c, j]
                        - coef_h[0] * f32(hr[c, j])
                    )
                    grad_k[row, c * L + j] = coef[0] * f32(hr[c, j]) * wws[c, j] - coef_k[0] * f32(
                        kr[c, j]
                    )
                for c, j in T.Parallel(C, L, coalesced_width=width):
                    grad_v[row, c * L + j] = g[0] * f32(gr[c, j])
                for c, j in T.Parallel(C, L):
                    pacc[c, j] += coef[0] * f32(hr[c, j]) * f32(kr[c, j])
            for c, j in T.Parallel(C, L, coalesced_width=T.int32(4)):
                partial[b, c * L + j] = pacc[c, j]

        reduce_partials(partial, w_h, w_k, grad_w_h, grad_w_k)

    return engram_gate_backward


def _reduce_kernel(T, n, B, GW):
    """Macro: a kernel summing ``partial[B, n]`` over the blocks of each weight row (``b % GW``)
    into the weight gradients ``[GW, n]``."""

    # The layouts inference picks, given so that a dynamic H costs it no search (see
    # engram_gate.chunk_layout): for static H each thread sums a 16-byte run of a partial row;
    # for dynamic H (element accesses under the bounds check) each lane sums one column.
    if isinstance(n, int):
        runs = RED_COLS // 4
        thread, index = (lambda gi, j: gi * runs + j // 4), (lambda gi, j: j % 4)
    else:
        rows = RED_THREADS // RED_COLS  # partial rows one pass of the block covers
        thread, index = (lambda gi, j: gi % rows * RED_COLS + j), (lambda gi, j: gi // rows)
    layout = T.Fragment((RED_GROUPS, RED_COLS), forward_thread_fn=thread, forward_index_fn=index)

    @T.macro
    def reduce_partials(partial, w_h, w_k, grad_w_h, grad_w_k):
        with T.Kernel(T.ceildiv(n, RED_COLS), GW, threads=RED_THREADS) as (bx, wb):
            acc = T.alloc_fragment((RED_GROUPS, RED_COLS), "float32")
            tot = T.alloc_fragment((RED_COLS,), "float32")
            T.annotate_layout({acc: layout})
            per = T.truncdiv(B, T.max(GW, 1))  # blocks of weight row wb: wb + GW * r
            T.clear(acc)
            for r in T.serial(T.ceildiv(per, RED_GROUPS)):
                for gi, j in T.Parallel(RED_GROUPS, RED_COLS, loop_layout=layout):
                    if (r * RED_GROUPS + gi < per) & (bx * RED_COLS + j < n):
                        acc[gi, j] += partial[wb + GW * (r * RED_GROUPS + gi), bx * RED_COLS + j]
            T.reduce_sum(acc, tot, dim=0)
            for j in T.Parallel(RED_COLS):
                if bx * RED_COLS + j < n:
                    col = bx * RED_COLS + j
                    grad_w_h[wb, col] = tot[j] * T.cast(w_k[wb, col], "float32")
                    grad_w_k[wb, col] = tot[j] * T.cast(w_h[wb, col], "float32")

    return reduce_partials


def _generic(dtype: str):
    import tilelang.language as T

    vec = 16 // ITEMSIZE[dtype]
    M = T.dynamic("M")
    MV = T.dynamic("MV")
    GW = T.dynamic("GW")
    H = T.dynamic("H")
    B = T.dynamic("B")
    vec_rows = _row_loop(T, M, MV, GW, H, B, GENERIC_THREADS * vec, T.int32(vec))
    scalar_rows = _row_loop(T, M, MV, GW, H, B, GENERIC_THREADS * SCALAR_PER_THREAD, None)
    reduce_partials = _reduce_kernel(T, H, B, GW)

    @T.prim_func
    def engram_gate_backward(
        grad_out: T.Tensor((M, H), dtype),
        h: T.Tensor((M, H), dtype),
        k: T.Tensor((M, H), dtype),
        v: T.Tensor((MV, H), dtype),
        w_h: T.Tensor((GW, H), dtype),
        w_k: T.Tensor((GW, H), dtype),
        dot: T.Tensor((M,), "float32"),
        gate: T.Tensor((M,), "float32"),
        rstd_h: T.Tensor((M,), "float32"),
        rstd_k: T.Tensor((M,), "float32"),
        grad_h: T.Tensor((M, H), dtype),
        grad_k: T.Tensor((M, H), dtype),
        grad_v: T.Tensor((M, H), dtype),
        grad_w_h: T.Tensor((GW, H), "float32"),
        grad_w_k: T.Tensor((GW, H), "float32"),
        partial: T.Tensor((B, H), "float32"),
        clamp: T.float32,
    ):
        with T.Kernel(B, threads=GENERIC_THREADS) as b:
            T.annotate_min_blocks_per_sm(GENERIC_BLOCKS_PER_SM)
            saved = (dot, gate, rstd_h, rstd_k)
            grads = (grad_h, grad_k, grad_v)
            if H % vec == 0:
                # Rows start 16-byte aligned: tell the vectoriser so it emits 16-byte accesses.
                T.assume(H % vec == 0)
                vec_rows(grad_out, h, k, v, w_h, w_k, *saved, *grads, partial, clamp, b)
            else:
                scalar_rows(grad_out, h, k, v, w_h, w_k, *saved, *grads, partial, clamp, b)

        reduce_partials(partial, w_h, w_k, grad_w_h, grad_w_k)

    return engram_gate_backward


def _row_loop(T, M, MV, GW, H, B, chunk: int, width):
    """Macro: block ``b``'s rows for dynamic H, two passes per row in ``chunk`` steps, its
    weight-gradient sum kept in ``partial[b, :]`` (L2-resident read-modify-write).

    ``width`` (an IntImm or None) is bound here: as a macro argument it would not stay
    constant. The loops doing fp32 vector math on global memory (zeroing ``partial``; grad_h,
    grad_k and the ``partial`` update) run 4 elements per thread and step (``fp32_layout``, a
    16-byte fp32 vector), whatever the input dtype: with the 8-element layout of the bf16
    staging buffers, TileLang 0.1.15 does that math 8 wide on sm_100+ (32-byte vectors of
    packed float2 ops) and writes the broadcast of a row scalar (``coef``, the 0 stored) as the
    address of an rvalue, which NVRTC rejects ("expression must be an lvalue"). A given loop
    layout overrides ``coalesced_width``, so the width is set by the layout. Their bf16
    accesses are therefore 8 bytes wide; a warp's access is one contiguous 256-byte (bf16) or
    512-byte (fp32) run. The same layouts on every arch: nothing is special to sm_100+.
    """
    fp32_width = None if width is None else T.int32(4)
    layout = chunk_layout(T, chunk, GENERIC_THREADS, 1 if width is None else int(width))
    fp32_layout = layout if width is None else chunk_layout(T, chunk, GENERIC_THREADS, 4)

    def f32(x):
        return T.cast(x, "float32")

    @T.macro
    def rows(
        grad_out,
        h,
        k,
        v,
        w_h,
        w_k,
        dot,
        gate,
        rstd_h,
        rstd_k,
        grad_h,
        grad_k,
        grad_v,
        partial,
        clamp,
        b,
    ):
        staged = ()  # the aligned path's 16-byte staging buffers of go and v
        if width is not None:
            staged = gb, vb = (T.alloc_fragment((chunk,), h.dtype) for _ in range(2))
        acc_g = T.alloc_fragment((chunk,), "float32")
        sum_g = T.alloc_fragment((1,), "float32")
        rh = T.alloc_fragment((1,), "float32")
        rk = T.alloc_fragment((1,), "float32")
        s = T.alloc_fragment((1,), "float32")
        g = T.alloc_fragment((1,), "float32")
        cs = T.alloc_fragment((1,), "float32")
        coef = T.alloc_fragment((1,), "float32")
        coef_h = T.alloc_fragment((1,), "float32")
        coef_k = T.alloc_fragment((1,), "float32")
        T.annotate_layout({x: layout for x in (*staged, acc_g)})
        n = T.cast(H, "float32")
        wrow = T.alloc_var("int32", init=weight_row(T, b, GW))
        T.assume((0 <= wrow) & (wrow < GW))
        for c in T.serial(T.ceildiv(H, chunk)):
            for j in T.Parallel(chunk, coalesced_width=fp32_width, loop_layout=fp32_layout):
                if c * chunk + j < H:
                    partial[b, c * chunk + j] = 0
        for i in T.serial(block_rows(T, b, M, B)):
            row = b + i * B
            vrow = T.alloc_var("int32", init=value_row(T, row, M, MV))
            T.assume((0 <= vrow) & (vrow < MV))
            # Pass 1: dg = <go, v> (the forward saved the rest). Chunks are loaded into
            # fragments of the input dtype first, so that the loads are 16 bytes wide.
            T.clear(acc_g)
            for c in T.serial(T.ceildiv(H, chunk)):
                if width is not None:
                    for j in T.Parallel(chunk, coalesced_width=width, loop_layout=layout):
                        gb[j] = T.if_then_else(c * chunk + j < H, grad_out[row, c * chunk + j], 0)
                        vb[j] = T.if_then_else(c * chunk + j < H, v[vrow, c * chunk + j], 0)
                for j in T.Parallel(chunk, coalesced_width=width, loop_layout=layout):
                    if c * chunk + j < H:
                        col = c * chunk + j
                        # The unaligned path reads global memory here (no staging: see
                        # engram_gate._row_pass).
                        gf = f32(gb[j] if width is not None else grad_out[row, col])
                        vf = f32(vb[j] if width is not None else v[vrow, col])
                        acc_g[j] += gf * vf
            T.reduce_sum(acc_g, sum_g, dim=0)
            rh[0] = rstd_h[row]  # the forward's statistics, as in the static kernel
            rk[0] = rstd_k[row]
            g[0] = gate[row]
            s[0] = dot[row] * rh[0] * rk[0] * T.rsqrt(n)
            cs[0] = slope(T, sum_g[0], g[0], s[0], clamp) * T.rsqrt(n)
            coef[0] = cs[0] * rh[0] * rk[0]
            coef_h[0] = cs[0] * rh[0] * rh[0] * s[0] * T.rsqrt(n)
            coef_k[0] = cs[0] * rk[0] * rk[0] * s[0] * T.rsqrt(n)
            # Pass 2: re-read the row (L1/L2 hit), write the gradients, add into partial[b].
            # Global operands straight in the expressions, no fragment staging (see above for
            # the widths).
            for c in T.serial(T.ceildiv(H, chunk)):
                for j in T.Parallel(chunk, coalesced_width=fp32_width, loop_layout=fp32_layout):
                    if c * chunk + j < H:
                        col = c * chunk + j
                        grad_h[row, col] = (
                            f32(grad_out[row, col])
                            + coef[0] * f32(k[row, col]) * f32(w_h[wrow, col]) * f32(w_k[wrow, col])
                            - coef_h[0] * f32(h[row, col])
                        )
                        grad_k[row, col] = coef[0] * f32(h[row, col]) * f32(w_h[wrow, col]) * f32(
                            w_k[wrow, col]
                        ) - coef_k[0] * f32(k[row, col])
                        partial[b, col] += coef[0] * f32(h[row, col]) * f32(k[row, col])
                for j in T.Parallel(chunk, coalesced_width=width, loop_layout=layout):
                    if c * chunk + j < H:
                        grad_v[row, c * chunk + j] = g[0] * f32(grad_out[row, c * chunk + j])

    return rows


def reference(grad_out, h, k, v, w_h, w_k, saved, clamp_value: float = 1e-6):
    """``(grad_h, grad_k, grad_v, grad_w_h, grad_w_k)`` from the forward's saved statistics.

    `saved` is ``(dot, g, rstd_h, rstd_k)`` as engram_gate_save (TileKernels' forward with
    ``save_for_backward=True``, or its reference ``engram_gate_ref(..., save_for_backward=True)
    [1:]``) returns them, each of shape ``h.shape[:-1]``. What TileKernels' backward
    (``tile_kernels.engram.engram_gate_bwd`` + ``grad_w_reduce``) computes from them: the
    closed forms of the module docstring, in float32 (float64 for float64 inputs); the slope
    floored below S_FLOOR as the kernels do. Rows are the last dim, every leading dim is a row
    dim; ``w_h``/``w_k`` are ``(H,)`` or ``h.shape[-2:]``; v is h's shape or ``[..., 1, H]``
    (its gradient summed over each token's rows). grad_h, grad_k, grad_v have h's dtype; the
    weight gradients stay in the math dtype (float32 for bf16, as TileKernels returns them).
    tests/test_kernels_cpu_engram_gate.py checks them against float64 autograd of TileKernels'
    reference.
    """
    import torch

    ct = torch.float64 if h.dtype == torch.float64 else torch.float32
    dot, g, rh, rk = (t.to(ct) for t in saved)
    go, x, kf, vf = (t.to(ct) for t in (grad_out, h, k, v))
    ww = w_h.to(ct) * w_k.to(ct)
    inv = h.shape[-1] ** -0.5
    s = dot * rh * rk * inv
    dg = (go * vf).sum(-1)
    root = s.abs().clamp_min(S_FLOOR).sqrt()
    c = torch.where(s.abs() < clamp_value, 0.0, dg * g * (1 - g) * 0.5 / root) * inv
    alpha, beta_h, beta_k = (c * rh * rk, c * rh * rh * s * inv, c * rk * rk * s * inv)
    grad_h = go + alpha[..., None] * kf * ww - beta_h[..., None] * x
    grad_k = alpha[..., None] * x * ww - beta_k[..., None] * kf
    grad_v = g[..., None] * go
    if v.shape != h.shape:  # a shared v: its rows' terms summed, then rounded once
        grad_v = grad_v.sum(-2, keepdim=True)
    p = alpha[..., None] * x * kf
    p = p.reshape(-1, h.shape[-1]).sum(0) if w_h.dim() == 1 else p.reshape(-1, *w_h.shape).sum(0)
    return (
        grad_h.to(h.dtype),
        grad_k.to(h.dtype),
        grad_v.to(h.dtype),
        p * w_k.to(ct),
        p * w_h.to(ct),
    )


SPEC = KernelSpec(
    op="engram_gate_backward",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({}, *({"H": n} for n in STATIC_H)),
    reference=reference,
    lowering_classes=BY_GENERATION,
    lowering_reason="block reductions: named barrier from sm_80; fp32 pairs packed from sm_100",
    doc="(grad_h, grad_k, grad_v, grad_w_h, grad_w_k fp32) of engram_gate from the forward's "
    "saved (dot, g, rstd_h, rstd_k) (TileKernels' semantics: weights [GW, H], clamp); "
    "scratch partial[B, H] fp32 (B blocks, a multiple of GW; "
    "deterministic two-kernel weight-gradient reduction).",
)
