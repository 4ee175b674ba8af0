"""MoE dispatch into a given fused layout: TileKernels 1.0.0's ``expand_to_fused`` (op
"expand_to_fused").

The layout comes from TileKernels' ``get_fused_mapping``: ``token_topk_to_pos[T, K]`` is the
row of the output holding (token t, slot k), or -1 (dropped); ``pos_to_expert[P]`` is the
expert of each output row, negative for a padding row::

    out[token_topk_to_pos[t, k]] = x[t]        where token_topk_to_pos[t, k] >= 0
    out[p] = 0                                 where pos_to_expert[p] < 0

Rows that are neither (a valid mapping has none) are left unwritten; TileKernels' kernel does
the same (its torch reference zeroes them). A position outside ``[0, P)`` is skipped rather than
used as an address (TileKernels assumes it cannot happen).

One kernel: block (b, c) moves column chunk c (``CHUNK`` elements, 16-byte vectors) of token
row b: it loads the chunk into registers once and stores it to each of the token's K rows; the
same block also zeroes chunk c of row b if row b is padding (grid ``max(T, P)`` rows). This
order scatters each token to up to K expert regions at once; moe_expand's faster
windowed order needs the rows grouped by source token (a work list it builds itself), and
this op's inputs give only the token -> row direction. The stores go through moe_expand's
evict-first 16-byte store (``L2_HINTS``): the op never reads the output back. Bytes are moved
as they are: bit-exact, NaN payloads and -0.0 included.

Rows whose byte length is not a multiple of 16 take a scalar path in the same kernel. Its
register count is the kernel's (one kernel for both paths): it holds `SCALAR_GROUP` elements
at a time, not the chunk's 32-64 (which had taken 168 registers per thread on sm_90a, 15 %
occupancy on the H200, for the aligned path too; now 36, tests/test_sass_generic.py).
Thread-level code throughout (``T.vectorized`` runs of exactly 16 bytes): TileLang 0.1.15
would emit 32-byte accesses on sm_100a for wider runs (ADDING_AN_OP.md).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec
from .moe_expand import L2_HINTS

DTYPES = ("bfloat16", "float8_e4m3fn")
ITEMSIZE = {"bfloat16": 2, "float8_e4m3fn": 1}
THREADS = 128
UNROLL = 4  # 16-byte vectors per thread per chunk: 8 KB of a row per block
CHUNK_BYTES = THREADS * UNROLL * 16
SCALAR_GROUP = 8  # elements of the scalar path held at once (a register each), of 32-64 per chunk


def factory(arch: str, dtype: str):
    """TileLang prim_func ``(x[T, H], token_topk_to_pos[T, K] i32, pos_to_expert[P] i32,
    out[P, H])``. ``arch`` changes only whether the stores use the inline-PTX L2 hint
    (CUDA targets) or a plain vector store."""
    if dtype not in DTYPES:
        raise ValueError(f"expand_to_fused: unsupported dtype {dtype!r}")
    return _build(dtype, arch.startswith("sm_"))


def _build(dtype: str, cuda: bool):
    import tilelang.language as T

    chunk = CHUNK_BYTES // ITEMSIZE[dtype]  # elements of a row per block
    Tn = T.dynamic("T")
    H = T.dynamic("H")
    K = T.dynamic("K")
    P = T.dynamic("P")
    rows = data_ops(T, dtype, cuda)

    @T.prim_func
    def expand_to_fused(
        x: T.Tensor((Tn, H), dtype),
        token_topk_to_pos: T.Tensor((Tn, K), "int32"),
        pos_to_expert: T.Tensor((P,), "int32"),
        out: T.Tensor((P, H), dtype),
    ):
        with T.Kernel(T.max(Tn, P), ceildiv(T, H, chunk), threads=THREADS) as (b, c):
            tx = T.get_thread_binding()
            rows(x, token_topk_to_pos, pos_to_expert, out, b, c, tx)

    return expand_to_fused


def data_ops(T, dtype: str, cuda: bool):
    """A ``T.macro`` ``(x, token_topk_to_pos, pos_to_expert, out, b, c, tx)``: block (b, c)'s
    share of the op (`row_ops`), by 16-byte vectors where rows start 16-byte aligned, else
    element by element; the L2-hinted store's source imported on CUDA targets."""
    vec = 16 // ITEMSIZE[dtype]
    chunk = CHUNK_BYTES // ITEMSIZE[dtype]
    vec_rows = row_ops(T, dtype, vec, chunk, cuda)
    scalar_rows = row_ops(T, dtype, 1, chunk, cuda)

    @T.macro
    def rows(x, token_topk_to_pos, pos_to_expert, out, b, c, tx):
        if cuda:
            T.import_source(L2_HINTS)
        if x.shape[1] % vec == 0:  # rows start 16-byte aligned: vectors
            T.assume(x.shape[1] % vec == 0)
            vec_rows(x, token_topk_to_pos, pos_to_expert, out, b, c, tx)
        else:
            scalar_rows(x, token_topk_to_pos, pos_to_expert, out, b, c, tx)

    return rows


def rolled(T, n):
    """``T.unroll(n, unroll_factor=1)``: a loop nvcc keeps rolled (``#pragma unroll 1``). The
    K loops (rows of a token) and the scalar path's groups: nvcc's unrolled copies, each with
    its own 64-bit row address and guards, had raised the register count."""
    return T.unroll(n, unroll_factor=1)


def row_ops(T, dtype: str, vec: int, chunk: int, cuda: bool):
    """A ``T.macro`` moving chunk c of row b: zero ``out[b]`` if it is padding, then copy
    ``x[b]`` to its K rows. ``vec`` elements per access (16 bytes, or 1 for unaligned rows);
    a chunk is ``chunk // vec`` accesses, ``chunk // (vec * THREADS)`` per thread, held in
    registers while they are stored to the K rows: all four vectors, or `SCALAR_GROUP`
    elements at a time (the whole chunk held, 32-64 elements, took 168 registers)."""
    per_thread = chunk // (vec * THREADS)
    group = per_thread if vec > 1 else SCALAR_GROUP
    hinted = cuda and vec > 1

    def column(c, u, tx):
        return c * chunk + (u * THREADS + tx) * vec

    @T.macro
    def store(out, p, col, frag, at):
        if hinted:
            T.evaluate(
                T.call_extern(
                    "void",
                    "tileaot_store_stream",
                    T.access_ptr(out[p, col], "w"),
                    T.access_ptr(frag[at], "r"),
                )
            )
        else:
            for v in T.vectorized(vec):
                out[p, col + v] = frag[at + v]

    @T.macro
    def move(x, token_topk_to_pos, pos_to_expert, out, b, c, tx):
        H = x.shape[1]
        frag = T.alloc_local((group * vec,), dtype)
        if b < out.shape[0]:
            if pos_to_expert[b] < 0:  # padding row: zeros
                for u in T.unroll(group * vec):
                    frag[u] = T.cast(0, dtype)
                for g in rolled(T, per_thread // group):
                    for u in T.unroll(group):
                        if column(c, g * group + u, tx) < H:
                            store(out, b, column(c, g * group + u, tx), frag, u * vec)
        if b < x.shape[0]:
            for g in rolled(T, per_thread // group):
                for u in T.unroll(group):
                    if column(c, g * group + u, tx) < H:
                        for v in T.vectorized(vec):
                            frag[u * vec + v] = x[b, column(c, g * group + u, tx) + v]
                for k in rolled(T, token_topk_to_pos.shape[1]):
                    p = T.alloc_var("int32", init=token_topk_to_pos[b, k])
                    if (p >= 0) & (p < out.shape[0]):
                        for u in T.unroll(group):
                            if column(c, g * group + u, tx) < H:
                                store(out, p, column(c, g * group + u, tx), frag, u * vec)

    return move


def reference(x, token_topk_to_pos, pos_to_expert):
    """torch reference, TileKernels' semantics: ``out[P, H]`` zero except the routed rows,
    ``out[token_topk_to_pos[t, k]] = x[t]`` (positions outside ``[0, P)`` skipped). Bytes are
    copied through a uint8 view, exact for every dtype."""
    import torch

    t, k = token_topk_to_pos.shape
    rows = pos_to_expert.shape[0]
    out = torch.zeros(rows, x.shape[1], dtype=x.dtype, device=x.device)
    pos = token_topk_to_pos.reshape(-1).long()
    live = (pos >= 0) & (pos < rows)
    src = torch.arange(t * k, device=pos.device) // max(k, 1)
    out.view(torch.uint8)[pos[live]] = x.view(torch.uint8)[src[live]]
    return out


SPEC = KernelSpec(
    op="expand_to_fused",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({},),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="per-thread copies, no PDL, reduction or arch choice (the L2 hint is "
    "guarded by __CUDA_ARCH__ in the source)",
    doc="out[token_topk_to_pos[t, k]] = x[t], out[p] = 0 where pos_to_expert[p] < 0 "
    "(TileKernels' fused layout from get_fused_mapping).",
)
