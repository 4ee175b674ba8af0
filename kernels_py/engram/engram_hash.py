"""Engram's multi-table n-gram hash (TileKernels 1.0.0's ``engram_hash``), bit for bit.

For layer ``l``, token ``t`` and n-gram order ``n = 2 .. N`` (``N = max_ngram_size``)::

    h[l, t, n]                  = XOR over i < n of int64(ids[t, i]) * multipliers[l, i]
    output[l, t, (n - 2) * E + j] = int32(h[l, t, n] mod int64(vocab_sizes[l, n - 2, j]))
                                  + offsets[l, (n - 2) * E + j]

with int64 products wrapping (two's complement), ``mod`` the floor remainder (the divisor's
sign, as torch's ``%``: TileKernels' reference; its kernel's TileLang ``%`` is the same
floormod), and the int32 sum wrapping. ``E`` is the number of embedding tables per order;
the offsets are usually the exclusive prefix sums of each layer's table sizes (TileKernels'
``make_offsets``).

Kernel: one thread per (token, layer), 128 tokens per block, the layer the grid's second
axis (as TileKernels, whose 32-thread blocks take one layer each). A thread reads its token's
N ids once and walks the orders, XOR-ing one product in per order and writing that order's E
indices. Variants: generic (every size at run time) and TileKernels' default ``N = 3, E = 8``
(the Engram model's 3-gram hash with 8 heads per order), fully unrolled.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec

DTYPES = ("int32",)
THREADS = 128
STATIC = ({"N": 3, "E": 8},)  # TileKernels' kernel defaults (max_ngram_size 3, 8 tables)


def factory(arch: str, dtype: str, N: int | None = None, E: int | None = None):
    """TileLang prim_func ``(ngram_token_ids[T, N] i32, multipliers[L, N] i64,
    vocab_sizes[L, N - 1, E] i32, offsets[L, (N - 1) * E] i32, output[L, T, (N - 1) * E]
    i32)``; `N` and `E` fixed or (None) read at run time. ``arch`` does not change the code."""
    if dtype not in DTYPES:
        raise ValueError(f"engram_hash: unsupported dtype {dtype!r}")
    if (N is None) != (E is None):
        raise ValueError("engram_hash: a specialisation fixes both N and E")
    if N is not None and (N < 2 or E < 1):
        raise ValueError(f"engram_hash: N={N}, E={E}: needs N >= 2 and E >= 1")
    return _kernel(N, E)


def _kernel(n_static: int | None, e_static: int | None):
    import tilelang.language as T

    Tn = T.dynamic("T")
    L = T.dynamic("L")
    if n_static is None:
        # Separate names for N - 1 and (N - 1) * E: a dynamic size must be a whole dim (the
        # runtime reads each off a shape); the wrapper's schema ties them to N and E.
        N, N1, E, C = T.dynamic("N"), T.dynamic("N1"), T.dynamic("E"), T.dynamic("C")
        orders, tables = T.serial, T.serial
    else:
        N, E = n_static, e_static
        N1, C = N - 1, (N - 1) * E
        orders, tables = T.unroll, T.unroll

    @T.prim_func
    def engram_hash(
        ngram_token_ids: T.Tensor((Tn, N), "int32"),
        multipliers: T.Tensor((L, N), "int64"),
        vocab_sizes: T.Tensor((L, N1, E), "int32"),
        offsets: T.Tensor((L, C), "int32"),
        output: T.Tensor((L, Tn, C), "int32"),
    ):
        with T.Kernel(ceildiv(T, Tn, THREADS), L, threads=THREADS) as (bx, layer):
            token = bx * THREADS + T.get_thread_binding()
            h = T.alloc_var("int64", init=T.int64(0))
            if token < Tn:
                h = T.Cast("int64", ngram_token_ids[token, 0]) * multipliers[layer, 0]
                for n in orders(1, N):
                    h = T.bitwise_xor(
                        h, T.Cast("int64", ngram_token_ids[token, n]) * multipliers[layer, n]
                    )
                    for j in tables(E):
                        col = (n - 1) * E + j
                        # floormod: the remainder takes the divisor's sign, as torch's `%`
                        rem = T.floormod(h, T.Cast("int64", vocab_sizes[layer, n - 1, j]))
                        # int32 wrap-around of the sum, as the reference's int32 addition
                        output[layer, token, col] = T.Cast("int32", rem) + offsets[layer, col]

    return engram_hash


def reference(ngram_token_ids, multipliers, vocab_sizes, offsets):
    """torch reference, TileKernels' semantics: ``output[L, T, (N - 1) * E]`` int32, the
    running XOR of the int64 products, floor remainder by each table size, plus the offsets
    (int32, wrapping)."""
    import torch

    ids = ngram_token_ids.to(torch.int64)
    prod = ids[None, :, :] * multipliers.to(torch.int64)[:, None, :]  # [L, T, N]
    sizes = vocab_sizes.to(torch.int64)  # [L, N - 1, E]
    h = prod[:, :, 0]
    cols = []
    for n in range(1, prod.shape[2]):
        h = h ^ prod[:, :, n]
        cols.append(torch.remainder(h[:, :, None], sizes[:, None, n - 1, :]).to(torch.int32))
    L, T = prod.shape[:2]
    out = torch.cat(cols, dim=2) if cols else torch.empty(L, T, 0, dtype=torch.int32)
    return out + offsets.to(torch.int32)[:, None, :]


SPEC = KernelSpec(
    op="engram_hash",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({}, *STATIC),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    doc="output[L, T, (N-1)*E] = (XOR-running n-gram hash of ngram_token_ids[T, N] with "
    "multipliers[L, N]) mod vocab_sizes[L, N-1, E] + offsets[L, (N-1)*E] (int32).",
)
