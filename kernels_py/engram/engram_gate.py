"""Engram gate, forward: a gated residual with one scalar gate per row (DeepSeek Engram).

TileKernels' semantics (`tile-kernels` 1.0.0: `tile_kernels.torch.engram.engram_gate_ref`,
`tile_kernels.modeling.engram.engram_gate`). For each row of h, k (``[M, H]``; the Python
layer flattens ``[T, G, H]`` to rows), its weight row ``w_* [row % GW]`` (``GW = G``: one
weight per hyper-connection branch, as TileKernels; ``GW = 1``: one weight shared by every
row) and its row of v, in float32::

    rstd_h = rsqrt(sum(h^2) / H + eps),  rstd_k = rsqrt(sum(k^2) / H + eps)
    dot    = sum(h * (w_h * w_k) * k)                    # the raw, unnormalised dot
    s      = dot * rstd_h * rstd_k / sqrt(H)
    g      = sigmoid(sign(s) * sqrt(max(|s|, clamp)))
    out    = h + g * v                                    # the product rounded, then the sum

``out`` is stored in h's dtype and ``g`` (fp32, one per row) is stored too, for callers that
want it. One pass over the row gives all three sums. The order of evaluation is TileKernels'
(the fused weight ``w_h * w_k`` is exact in fp32 for bf16 weights; the products
``(h * w) * k`` as its kernel forms them; ``g * v`` rounded before the add, as its reference
does: no FMA there) so that bf16 outputs round as TileKernels' reference's do.

Memory-bound: one read of h, k, v and one write of out (weights are re-read from L1/L2).

v is ``[MV, H]``: either h's rows (``MV = M``) or one row shared by each run of ``M / MV``
consecutive rows (``[T, 1, H]`` for ``[T, G, H]`` h: Engram with hyper-connections keeps a
key per branch but one value per token). Row ``r`` reads v row ``r * MV // M`` (see
``value_row``); the G rows of a token run on neighbouring blocks, so v's row comes from HBM
once and from L2 after that.

* Static H (``{"H": 7168}`` etc.): one row per thread block (128 threads for bf16 H=7168,
  256 otherwise); h, k and v are loaded at once (16-byte vectors, kept in registers in their
  own dtype), the three sums are block-reduced, and the output is written from the
  registers: exactly one HBM read per input element. ``__launch_bounds__`` asks for 512
  threads per SM (4 rows in flight for bf16 H=7168: 128 registers, no spills).
* Generic (``{}``, H dynamic): two passes over the row in chunks (the sums, then the output;
  the second read of h hits L1/L2). A runtime branch picks 16-byte vector access when H is a
  multiple of the vector width and scalar access otherwise, so any H works.

Every loop touching global memory carries ``coalesced_width`` = one 16-byte vector (TileLang
0.1.15 otherwise emits 32-byte accesses on sm_100a). Base pointers must be 16-byte aligned.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
import math

from ..spec import BY_GENERATION, KernelSpec

DTYPES = ("bfloat16", "float32")
ITEMSIZE = {"bfloat16": 2, "float32": 4}
STATIC_H = (2048, 4096, 7168)

GENERIC_THREADS = 128  # threads per row in the generic kernel
GENERIC_UNROLL = 2  # 16-byte vectors per thread per chunk
SCALAR_PER_THREAD = 4  # elements per thread per chunk on the unaligned (H % vec != 0) path
MAX_ROW_THREADS = 256


def factory(arch: str, dtype: str, H: int | None = None, save: bool = False):
    """TileLang prim_func ``(h, k [M, H], v [MV, H], w_h, w_k [GW, H], out [M, H], g [M]
    fp32, eps, clamp)``; v is h's rows (MV = M) or shared by runs of M / MV rows (see
    ``value_row``); row r uses weight row ``r % GW``.

    With `save` (op engram_gate_save, TileKernels' ``save_for_backward=True``) the outputs
    are ``out, dot, g, rstd_h, rstd_k`` (each [M] fp32 after out, TileKernels' order): the
    raw dot and both reciprocal RMS, written from the same row sums the gate comes from.

    The same code serves every CUDA arch, so ``arch`` only takes part in the interface.
    """
    if dtype not in DTYPES:
        raise ValueError(f"engram_gate: unsupported dtype {dtype!r}")
    return _generic(dtype, save) if H is None else _static(dtype, H, save)


def row_threads(n: int, vec: int) -> int:
    """Threads for a register-resident row of ``n`` elements: whole 16-byte vectors each.

    The largest power of two (TileLang's block all-reduce needs one) up to 256 that divides
    the row's vector count: 128 for bf16 H=7168 (7 vectors each), 256 for the others.
    """
    if n % vec:
        raise ValueError(f"engram_gate: H={n} is not a multiple of {vec}")
    threads = MAX_ROW_THREADS
    while (n // vec) % threads:
        threads //= 2
    if threads < 32:
        raise ValueError(f"engram_gate: no thread count fits H={n}")
    return threads


def value_row(T, row, M, MV):
    """The row of v ``[MV, H]`` that row `row` of h ``[M, H]`` uses: ``row // (M / MV)``.

    That is ``row // G`` when v is shared by runs of ``G = M / MV`` rows (``row`` when
    ``MV = M``). Clamped into ``[0, MV)`` so that sizes that don't divide can't read out of
    bounds (the Python layer rejects them first). int32 only: a 64-bit division is a
    subroutine call on the GPU, and its register traffic made the backward kernel's spills
    4x larger (and the kernel 29 % slower on an H200). Callers bind it to a local and
    ``T.assume`` its range: the bounds check TileLang would otherwise put around v's loads
    costs a branch per load (and, without the local, their 16-byte vectorisation).
    """
    group = T.max(T.truncdiv(M, T.max(MV, 1)), 1)
    return T.min(T.truncdiv(row, group), MV - 1)


def weight_row(T, row, GW):
    """The weight row of h's row `row`: ``row % GW`` (its branch; 0 for shared weights)."""
    return T.truncmod(row, T.max(GW, 1))


def gate_of(T, s, clamp):
    """sigmoid(sign(s) * sqrt(max(|s|, clamp))) as a TileLang expression (fp32).

    ``sign(0) = 0`` as in torch: a row with s = 0 gets the gate 1/2 whatever `clamp` is.
    """
    z = T.if_then_else(s == 0.0, 0.0, T.copysign(T.sqrt(T.max(T.abs(s), clamp)), s))
    return 1.0 / (1.0 + T.exp(-z))


def chunk_layout(T, chunk: int, threads: int, step: int):
    """The layout of one row chunk of a generic kernel: runs of `step` consecutive elements
    (one 16-byte vector on the aligned path, one element on the unaligned one) dealt to the
    `threads` threads in turn, as coalesced access wants.

    Every T.Parallel loop and per-chunk fragment of the generic kernels is given it, so that
    TileLang's layout inference has nothing to search. Left to infer them it tries candidate
    layouts for each loop under its vectoriser's proofs, Z3 queries over the dynamic H, and
    took minutes per arch (the forward's aligned path alone: 37 s of CPU against 14 s given
    the layout, for the identical CUDA source).
    """
    return T.Fragment(
        (chunk,),
        forward_thread_fn=lambda j: (j // step) % threads,
        forward_index_fn=lambda j: (j // (step * threads)) * step + j % step,
    )


def _static(dtype: str, n: int, save: bool = False):
    import tilelang.language as T

    vec = 16 // ITEMSIZE[dtype]
    threads = row_threads(n, vec)
    L = threads * vec  # elements one pass of the block covers
    C = n // L  # vectors per thread per row
    width = T.int32(vec)  # coalesced_width must be an IntImm, not a Python int
    n_f = T.float32(n)
    inv_sqrt_n = 1.0 / math.sqrt(n)
    M = T.dynamic("M")
    MV = T.dynamic("MV")
    GW = T.dynamic("GW")

    @T.macro
    def gate_rows(h, k, v, w_h, w_k, out, dot, g, rstd_h, rstd_k, eps, clamp):
        with T.Kernel(M, threads=threads) as row:
            # 512 threads per SM at least (4 rows of 128 threads: 128 registers, no spills).
            T.annotate_min_blocks_per_sm(512 // threads)
            hr = T.alloc_fragment((C, L), dtype)
            kr = T.alloc_fragment((C, L), dtype)
            vr = T.alloc_fragment((C, L), dtype)
            acc_h = T.alloc_fragment((L,), "float32")
            acc_k = T.alloc_fragment((L,), "float32")
            acc_d = T.alloc_fragment((L,), "float32")
            sum_h = T.alloc_fragment((1,), "float32")
            sum_k = T.alloc_fragment((1,), "float32")
            sum_d = T.alloc_fragment((1,), "float32")
            gr = T.alloc_fragment((1,), "float32")
            vrow = T.alloc_var("int32", init=value_row(T, row, M, MV))
            T.assume((0 <= vrow) & (vrow < MV))
            wrow = T.alloc_var("int32", init=weight_row(T, row, GW))
            T.assume((0 <= wrow) & (wrow < GW))
            # All loads first (v too), so a thread has the whole row in flight at once.
            for c, j in T.Parallel(C, L, coalesced_width=width):
                hr[c, j] = h[row, c * L + j]
                kr[c, j] = k[row, c * L + j]
                vr[c, j] = v[vrow, c * L + j]
            T.clear(acc_h)
            T.clear(acc_k)
            T.clear(acc_d)
            for c in T.unroll(C):
                for j in T.Parallel(L, coalesced_width=width):
                    hf = T.cast(hr[c, j], "float32")
                    kf = T.cast(kr[c, j], "float32")
                    ww = T.cast(w_h[wrow, c * L + j], "float32") * T.cast(
                        w_k[wrow, c * L + j], "float32"
                    )
                    acc_h[j] += hf * hf
                    acc_k[j] += kf * kf
                    acc_d[j] += hf * ww * kf
            T.reduce_sum(acc_h, sum_h, dim=0)
            T.reduce_sum(acc_k, sum_k, dim=0)
            T.reduce_sum(acc_d, sum_d, dim=0)
            gr[0] = gate_of(
                T,
                sum_d[0]
                * T.rsqrt(sum_h[0] / n_f + eps)
                * T.rsqrt(sum_k[0] / n_f + eps)
                * inv_sqrt_n,
                clamp,
            )
            g[row] = gr[0]
            if save:  # a Python flag: the default variant's code stays as it was
                dot[row] = sum_d[0]
                rstd_h[row] = T.rsqrt(sum_h[0] / n_f + eps)
                rstd_k[row] = T.rsqrt(sum_k[0] / n_f + eps)
            # out in place of h in registers (__fmul_rn: no FMA, g * v rounded first; the call
            # would keep a loop touching global memory from vectorising), then 16-byte stores.
            for c, j in T.Parallel(C, L):
                hr[c, j] = T.cast(
                    T.cast(hr[c, j], "float32") + T.ieee_mul(gr[0], T.cast(vr[c, j], "float32")),
                    dtype,
                )
            for c, j in T.Parallel(C, L, coalesced_width=width):
                out[row, c * L + j] = hr[c, j]

    return _entry(T, gate_rows, dtype, M, MV, GW, n, save)


def _entry(T, gate_rows, dtype: str, M, MV, GW, n, save: bool):
    """The prim_func around the kernel macro `gate_rows`: ``(..., out, g, eps, clamp)``, or
    with `save` ``(..., out, dot, g, rstd_h, rstd_k, eps, clamp)`` (TileKernels' order of its
    forward's returns). The default one passes `g` for the unused statistics: never written."""
    if not save:

        @T.prim_func
        def engram_gate(
            h: T.Tensor((M, n), dtype),
            k: T.Tensor((M, n), dtype),
            v: T.Tensor((MV, n), dtype),
            w_h: T.Tensor((GW, n), dtype),
            w_k: T.Tensor((GW, n), dtype),
            out: T.Tensor((M, n), dtype),
            g: T.Tensor((M,), "float32"),
            eps: T.float32,
            clamp: T.float32,
        ):
            gate_rows(h, k, v, w_h, w_k, out, g, g, g, g, eps, clamp)

        return engram_gate

    @T.prim_func
    def engram_gate_save(
        h: T.Tensor((M, n), dtype),
        k: T.Tensor((M, n), dtype),
        v: T.Tensor((MV, n), dtype),
        w_h: T.Tensor((GW, n), dtype),
        w_k: T.Tensor((GW, n), dtype),
        out: T.Tensor((M, n), dtype),
        dot: T.Tensor((M,), "float32"),
        g: T.Tensor((M,), "float32"),
        rstd_h: T.Tensor((M,), "float32"),
        rstd_k: T.Tensor((M,), "float32"),
        eps: T.float32,
        clamp: T.float32,
    ):
        gate_rows(h, k, v, w_h, w_k, out, dot, g, rstd_h, rstd_k, eps, clamp)

    return engram_gate_save


def _generic(dtype: str, save: bool = False):
    import tilelang.language as T

    vec = 16 // ITEMSIZE[dtype]
    M = T.dynamic("M")
    MV = T.dynamic("MV")
    GW = T.dynamic("GW")
    H = T.dynamic("H")
    vec_rows = _row_pass(T, H, GW, GENERIC_THREADS * vec * GENERIC_UNROLL, T.int32(vec), save)
    scalar_rows = _row_pass(T, H, GW, GENERIC_THREADS * SCALAR_PER_THREAD, None, save)

    @T.macro
    def gate_rows(h, k, v, w_h, w_k, out, dot, g, rstd_h, rstd_k, eps, clamp):
        with T.Kernel(M, threads=GENERIC_THREADS) as row:
            vrow = T.alloc_var("int32", init=value_row(T, row, M, MV))
            T.assume((0 <= vrow) & (vrow < MV))
            stats = (dot, g, rstd_h, rstd_k)
            if H % vec == 0:
                # Rows start 16-byte aligned: tell the vectoriser so it emits 16-byte accesses.
                T.assume(H % vec == 0)
                vec_rows(h, k, v, w_h, w_k, out, *stats, eps, clamp, row, vrow)
            else:
                scalar_rows(h, k, v, w_h, w_k, out, *stats, eps, clamp, row, vrow)

    return _entry(T, gate_rows, dtype, M, MV, GW, H, save)


def _row_pass(T, H, GW, chunk: int, width, save: bool = False):
    """Macro gating one row of dynamic length H, ``chunk`` elements per step.

    ``width`` (an IntImm or None) is the loops' coalesced_width; it is bound here rather than
    passed as a macro argument because macro arguments reach the loop as non-constants. The
    weight row is bound (and its range assumed) inside the macro: an assume made outside does
    not reach a macro argument, and the bounds check it leaves costs the loop its vectors.
    """

    layout = chunk_layout(T, chunk, GENERIC_THREADS, 1 if width is None else int(width))

    @T.macro
    def gate_row(h, k, v, w_h, w_k, out, dot, g, rstd_h, rstd_k, eps, clamp, row, vrow):
        wrow = T.alloc_var("int32", init=weight_row(T, row, GW))
        T.assume((0 <= wrow) & (wrow < GW))
        staged = ()  # the aligned path's 16-byte staging buffers (of h and k, then h and v)
        if width is not None:
            staged = hb, kb = (T.alloc_fragment((chunk,), h.dtype) for _ in range(2))
        acc_h = T.alloc_fragment((chunk,), "float32")
        acc_k = T.alloc_fragment((chunk,), "float32")
        acc_d = T.alloc_fragment((chunk,), "float32")
        sum_h = T.alloc_fragment((1,), "float32")
        sum_k = T.alloc_fragment((1,), "float32")
        sum_d = T.alloc_fragment((1,), "float32")
        gr = T.alloc_fragment((1,), "float32")
        T.annotate_layout({x: layout for x in (*staged, acc_h, acc_k, acc_d)})
        # Pass 1: per-thread partial sums, then block all-reduces. The chunk is loaded into
        # fragments of the input dtype first: the fp32 accumulation would otherwise limit the
        # loads to 4 elements.
        T.clear(acc_h)
        T.clear(acc_k)
        T.clear(acc_d)
        for c in T.serial(T.ceildiv(H, chunk)):
            if width is not None:
                for j in T.Parallel(chunk, coalesced_width=width, loop_layout=layout):
                    hb[j] = T.if_then_else(c * chunk + j < H, h[row, c * chunk + j], 0)
                    kb[j] = T.if_then_else(c * chunk + j < H, k[row, c * chunk + j], 0)
            for j in T.Parallel(chunk, coalesced_width=width, loop_layout=layout):
                if c * chunk + j < H:
                    # The unaligned path reads global memory here: element accesses need no
                    # staging, and each guarded staging loop costs the lowering time.
                    hf = T.cast(hb[j] if width is not None else h[row, c * chunk + j], "float32")
                    kf = T.cast(kb[j] if width is not None else k[row, c * chunk + j], "float32")
                    ww = T.cast(w_h[wrow, c * chunk + j], "float32") * T.cast(
                        w_k[wrow, c * chunk + j], "float32"
                    )
                    acc_h[j] += hf * hf
                    acc_k[j] += kf * kf
                    acc_d[j] += hf * ww * kf
        T.reduce_sum(acc_h, sum_h, dim=0)
        T.reduce_sum(acc_k, sum_k, dim=0)
        T.reduce_sum(acc_d, sum_d, dim=0)
        n = T.cast(H, "float32")
        gr[0] = gate_of(
            T,
            sum_d[0] * T.rsqrt(sum_h[0] / n + eps) * T.rsqrt(sum_k[0] / n + eps) * T.rsqrt(n),
            clamp,
        )
        g[row] = gr[0]
        if save:  # a Python flag (see _static)
            dot[row] = sum_d[0]
            rstd_h[row] = T.rsqrt(sum_h[0] / n + eps)
            rstd_k[row] = T.rsqrt(sum_k[0] / n + eps)
        # Pass 2: re-read h (L1/L2 hit), read v, store; staged in registers so that the loads
        # and stores stay vectorised around __fmul_rn (g * v rounded first: no FMA).
        for c in T.serial(T.ceildiv(H, chunk)):
            if width is None:
                for j in T.Parallel(chunk, loop_layout=layout):
                    if c * chunk + j < H:
                        out[row, c * chunk + j] = T.cast(
                            T.cast(h[row, c * chunk + j], "float32")
                            + T.ieee_mul(gr[0], T.cast(v[vrow, c * chunk + j], "float32")),
                            h.dtype,
                        )
            else:
                for j in T.Parallel(chunk, coalesced_width=width, loop_layout=layout):
                    hb[j] = T.if_then_else(c * chunk + j < H, h[row, c * chunk + j], 0)
                    kb[j] = T.if_then_else(c * chunk + j < H, v[vrow, c * chunk + j], 0)
                for j in T.Parallel(chunk, loop_layout=layout):
                    hb[j] = T.cast(
                        T.cast(hb[j], "float32") + T.ieee_mul(gr[0], T.cast(kb[j], "float32")),
                        h.dtype,
                    )
                for j in T.Parallel(chunk, coalesced_width=width, loop_layout=layout):
                    if c * chunk + j < H:
                        out[row, c * chunk + j] = hb[j]

    return gate_row


def reference(h, k, v, w_h, w_k, eps: float = 1e-6, clamp_value: float = 1e-6):
    """torch reference ``(out, g)``, TileKernels' ``engram_gate_ref`` evaluated the same way.

    Rows are the last dim. ``w_h``/``w_k`` are ``(H,)`` (shared) or ``h.shape[-2:]`` (one
    row per branch); they broadcast. v has h's shape or ``[..., 1, H]``. fp32 math (fp64 for
    fp64 inputs); ``out`` has h's dtype, ``g`` (shape ``h.shape[:-1]``) the math dtype.
    """
    out, _dot, g, _rh, _rk = statistics(h, k, v, w_h, w_k, eps, clamp_value)
    return out, g


def statistics(h, k, v, w_h, w_k, eps: float = 1e-6, clamp_value: float = 1e-6):
    """``(out, dot, g, rstd_h, rstd_k)`` as TileKernels' reference with ``save_for_backward``:
    ``dot`` is the raw ``sum(h * w_h * k * w_k)`` per row."""
    import torch

    ct = torch.float64 if h.dtype == torch.float64 else torch.float32
    x, kf = h.to(ct), k.to(ct)
    rh = torch.rsqrt(x.pow(2).mean(-1) + eps)
    rk = torch.rsqrt(kf.pow(2).mean(-1) + eps)
    dot = torch.einsum("...d,...d->...", x * w_h.to(ct), kf * w_k.to(ct))
    s = dot * rh * rk * h.shape[-1] ** -0.5
    g = (s.abs().clamp_min(clamp_value).sqrt() * s.sign()).sigmoid()
    out = x + g.unsqueeze(-1) * v.to(ct)  # v [..., 1, H] (shared by a token's rows) broadcasts
    return out.to(h.dtype), dot, g, rh, rk


SPEC = KernelSpec(
    op="engram_gate",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({}, *({"H": n} for n in STATIC_H)),
    reference=reference,
    lowering_classes=BY_GENERATION,
    lowering_reason="block reductions: named barrier from sm_80; fp32 pairs packed from sm_100",
    doc="TileKernels' engram gate: out = h + sigmoid(signed_sqrt(max(|s|, clamp))) * v, "
    "s = <rmsnorm(h) w_h, rmsnorm(k) w_k> / sqrt(H); h, k [M, H], v [M, H] or shared by runs of "
    "rows [MV, H], w_h, w_k [GW, H] (per branch, or GW = 1); also the gate [M] (fp32).",
)
