"""MoE token dispatch: group the rows of x by expert (op "moe_expand").

Given ``idx[T, K]`` (the expert of each (token, slot); -1 or any value outside ``[0, E)`` means
"dropped"), the entries are ordered by expert, then token, then slot. Expert ``e`` owns rows
``[offsets[e], offsets[e + 1])`` of ``x_sorted``: first its ``count[e]`` entries, then zero rows
up to a multiple of ``alignment``. ``token_pos[t, j]`` is the row holding (t, j), or -1::

    offsets[0] = 0, offsets[e + 1] = offsets[e] + ceil(count[e] / alignment) * alignment
    x_sorted[token_pos[t, j]] = x[t]          (and x_sorted_scale likewise for fp8)

``x_sorted`` has ``P = T*K + E*(alignment - 1)`` rows, the most any routing can use, so the host
never waits for the counts; rows at or past ``offsets[E]`` are not written.

Five kernels, run in order on one stream (one prim_func, several ``T.Kernel`` blocks; the
generated launcher keeps their order). An entry is (t, j), flattened to ``g = t*K + j``; the
entries are cut into chunks of ``CHUNK`` consecutive ones, each handled by one warp (32 entries
per lane, all loaded up front into registers):

1. count: per chunk, a shared-memory histogram over experts → ``chunk_counts[c, e]``.
2. scan: per expert, an exclusive prefix over the chunks (in place) and the total
   ``expert_counts[e]``. A block of 32 warps covers 32 experts, each warp a run of chunks.
3. rank: each block scans the padded totals (the offsets; block 0 writes ``expert_offsets``),
   then each warp walks its chunk 32 entries at a time in order: ``__match_any_sync`` groups
   equal experts, the rank among them is a popcount of the lower lanes, and a per-warp
   shared counter per expert (started at offsets[e] + chunk prefix) advances. Positions are
   therefore deterministic: ascending token, then slot, inside each expert.
4. pad: zero the padding rows, ``PAD_ROWS`` rows per block, grid (ceil((alignment-1)/8), E);
   with alignment 1 the grid is empty and the launcher skips it.
5. copy: one block per (token, 16 KB of its row) loads that piece once (16-byte vectors, in
   registers) and stores it to each of the token's K rows (one explicit st.global.v4 per
   vector); block column 0 also copies the fp8 scales.

On sm_90+ the kernels chain by programmatic dependent launch (``PDL`` below): each starts
while its predecessor finishes and waits for it before reading what it wrote.

The copy reads x once and writes each routed row once: bandwidth-bound by design. Kernels
1-3 touch only the int32 metadata (a few MB at most).

Dtypes: bf16 (vectorised when ``H % 8 == 0``, scalar otherwise) and OCP e4m3fn with
per-128-column fp32 scales (``H % 128 == 0``). Rows are copied as bytes: bit-exact, NaN
payloads included. Thread-level code throughout (``T.vectorized`` runs of exactly 16 bytes, no
``T.Parallel``): TileLang 0.1.15 would emit 32-byte accesses on sm_100a for wider runs, and
layout inference of tile loops made tracing several times slower.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..spec import KernelSpec

DTYPES = ("bfloat16", "float8_e4m3fn")
ITEMSIZE = {"bfloat16": 2, "float8_e4m3fn": 1}
GROUP = 128  # fp8: columns per scale
E_MAX = 1024  # generic variant: largest number of experts
SPEC_E = (64, 128, 256)

WARPS = 4  # count and rank kernels: warps per block, one chunk each
CHUNK = 1024  # entries per chunk: 32 per lane
SCAN_WARPS = 32  # scan kernel: 32 warps (chunk runs) x 32 lanes (experts) per block
COPY_THREADS = 128
# 16-byte vectors per thread per row chunk: 8 makes a chunk 16 KB, one CTA per token for rows
# up to 8192 bf16 (1188 us against 1225 us with 4 KB chunks, H200, T = 32768, H = 7168,
# bench/results/2026-11-29-h200-tuning.md); unused vectors of shorter rows are skipped.
COPY_UNROLL = 8
PAD_ROWS = 8  # padding rows zeroed per padding block
# PDL: programmatic dependent launch between the five kernels (sm_90 and newer only; older
# targets and HIP keep plain stream order). A kernel waits for its predecessor before touching
# anything it wrote, and only then lets its own successor launch, so each wait also covers
# every kernel before it. Work done before the wait reads only x and idx, which no kernel of
# the op writes: the rank kernel's idx loads and the copy's row load. The count kernel never
# waits, so it still starts after all earlier work on the stream. Measured on an H200
# (bench/tune.py, T = 32768, H = 7168, E = 256): 1167.7 -> 1164.3 us bf16 a16, 652.9 ->
# 649.3 us e4m3 a128; an earlier run 1172.5 -> 1161.8 (bench/results/2026-11-29-h200-tuning.md,
# "Session 5").
PDL = True


def factory(arch: str, dtype: str, E: int | None = None):
    """TileLang prim_func, tensors in call order, then the alignment scalar::

        x[T, H], (x_scale[T, H/128] fp8 only), idx[T, K] int32,
        x_sorted[P, H], (x_sorted_scale[P, H/128]), expert_offsets[E + 1] int32,
        token_pos[T, K] int32, chunk_counts[ceil(T*K / 1024), E] int32 (scratch),
        expert_counts[E] int32 (scratch), alignment: int32

    ``arch`` does not change the code, except that PDL and the explicit 16-byte stores
    (inline PTX) apply to CUDA targets only.
    """
    if dtype not in DTYPES:
        raise ValueError(f"moe_expand: unsupported dtype {dtype!r}")
    if E is not None and not 0 < E <= E_MAX:
        raise ValueError(f"moe_expand: E={E} is outside [1, {E_MAX}]")
    return _build(dtype, E, arch)


def _build(dtype: str, e_static: int | None, arch: str):
    import tilelang.language as T

    fp8 = dtype == "float8_e4m3fn"
    vec = 16 // ITEMSIZE[dtype]
    e_max = E_MAX if e_static is None else e_static
    per_thread = -(-e_max // (32 * WARPS))  # experts per thread in the offsets scan
    Tn = T.dynamic("T")
    H = T.dynamic("H")
    K = T.dynamic("K")
    P = T.dynamic("P")
    E = T.dynamic("E") if e_static is None else e_static
    NC = (Tn * K + CHUNK - 1) // CHUNK
    G = H // GROUP

    chunk = COPY_THREADS * vec * COPY_UNROLL  # row elements per copy block (16 KB)
    cuda = arch.startswith("sm_")
    # griddepcontrol needs sm_90 (TileLang refuses PDL calls when lowering for older targets);
    # HIP has none.
    pdl = PDL and cuda and int(arch[3:].rstrip("af")) >= 90
    vec_copy, vec_zero = _row_ops(T, H, K, P, G, vec, COPY_UNROLL, dtype, fp8, cuda, pdl)
    scalar_copy, scalar_zero = _row_ops(T, H, K, P, G, 1, vec * COPY_UNROLL, dtype, fp8, cuda, pdl)

    @T.macro
    def copy_chunk(x, xsc, xs, xss, pos, t, c, tx):
        if fp8:  # H % 128 == 0 (a constraint): rows always start 16-byte aligned
            T.assume(H % vec == 0)
            vec_copy(x, xsc, xs, xss, pos, t, c, tx)
        elif H % vec == 0:  # bf16: 16-byte vectors while rows stay aligned, scalars otherwise
            T.assume(H % vec == 0)
            vec_copy(x, xsc, xs, xss, pos, t, c, tx)
        else:
            scalar_copy(x, xsc, xs, xss, pos, t, c, tx)

    @T.macro
    def zero_row(xs, row, tx):
        for c in T.serial(T.ceildiv(H, chunk)):
            if fp8:
                T.assume(H % vec == 0)
                vec_zero(xs, row, c, tx)
            elif H % vec == 0:
                T.assume(H % vec == 0)
                vec_zero(xs, row, c, tx)
            else:
                scalar_zero(xs, row, c, tx)

    @T.macro
    def wait_then_release():
        # PDL: wait for the previous kernel to finish, then let the next one launch. Waiting
        # first keeps the chain transitive (see PDL at the top of the file).
        if pdl:
            T.pdl_sync()
            T.pdl_trigger()

    @T.macro
    def count_kernel(idx, chunk_counts):
        # One warp per chunk: a private shared histogram, then one row of chunk_counts.
        with T.Kernel(T.ceildiv(NC, WARPS), threads=32 * WARPS) as b:
            tx = T.get_thread_binding()
            w = tx // 32
            lane = tx % 32
            c = b * WARPS + w
            if pdl:  # no wait here: count starts after earlier work as without PDL
                T.pdl_trigger()
            flat = T.reshape(idx, (Tn * K,))
            hist = T.alloc_shared((WARPS, e_max), "int32")
            ev = T.alloc_local((CHUNK // 32,), "int32")
            for i in T.unroll(CHUNK // 32):  # all loads first: 32 in flight per lane
                g = c * CHUNK + i * 32 + lane
                ev[i] = T.if_then_else(g < Tn * K, flat[g], -1)
            for i in T.serial(T.ceildiv(E, 32)):
                if i * 32 + lane < E:
                    hist[w, i * 32 + lane] = 0
            for i in T.unroll(CHUNK // 32):
                if (ev[i] >= 0) & (ev[i] < E):
                    T.atomic_add(hist[w, ev[i]], 1)
            for i in T.serial(T.ceildiv(E, 32)):
                if (i * 32 + lane < E) & (c < NC):
                    chunk_counts[c, i * 32 + lane] = hist[w, i * 32 + lane]

    @T.macro
    def scan_kernel(chunk_counts, expert_counts):
        # Block: 32 experts (lanes) x 32 runs of chunks (warps). Per-run sums, an exclusive
        # scan over the runs in shared memory, then each run rewrites its counts in place as
        # exclusive prefixes; warp 0 writes the expert totals.
        with T.Kernel(T.ceildiv(E, 32), threads=32 * SCAN_WARPS) as b:
            tx = T.get_thread_binding()
            w = tx // 32
            lane = tx % 32
            e = b * 32 + lane
            wait_then_release()
            run = T.ceildiv(NC, SCAN_WARPS)
            part = T.alloc_shared((SCAN_WARPS, 33), "int32")
            acc = T.alloc_var("int32", init=0)
            for i in T.serial(run):
                if (w * run + i < NC) & (e < E):
                    acc += chunk_counts[w * run + i, e]
            part[w, lane] = acc
            before = T.alloc_var("int32", init=0)
            total = T.alloc_var("int32", init=0)
            for v in T.unroll(SCAN_WARPS):
                before += T.if_then_else(v < w, part[v, lane], 0)
                total += part[v, lane]
            for i in T.serial(run):
                if (w * run + i < NC) & (e < E):
                    acc = chunk_counts[w * run + i, e]
                    chunk_counts[w * run + i, e] = before
                    before += acc
            if (w == 0) & (e < E):
                expert_counts[e] = total

    @T.macro
    def rank_kernel(idx, expert_offsets, token_pos, chunk_counts, expert_counts, alignment):
        with T.Kernel(T.ceildiv(NC, WARPS), threads=32 * WARPS) as b:
            tx = T.get_thread_binding()
            w = tx // 32
            lane = tx % 32
            c = b * WARPS + w
            flat = T.reshape(idx, (Tn * K,))
            flat_pos = T.reshape(token_pos, (Tn * K,))
            ev = T.alloc_local((CHUNK // 32,), "int32")
            for i in T.unroll(CHUNK // 32):  # issue the chunk's loads before the scan
                g = c * CHUNK + i * 32 + lane
                ev[i] = T.if_then_else(g < Tn * K, flat[g], -1)
            wait_then_release()  # the loads above read idx only

            # Offsets: exclusive scan of the padded counts; thread tx owns `per_thread`
            # consecutive experts. Warp scans by shuffles, then across the warps.
            padded = T.alloc_local((per_thread,), "int32")
            warp_sum = T.alloc_shared((WARPS,), "int32")
            offsets = T.alloc_shared((e_max,), "int32")
            mine = T.alloc_var("int32", init=0)
            for u in T.unroll(per_thread):
                e = tx * per_thread + u
                n = T.if_then_else(e < E, expert_counts[e], 0)
                padded[u] = (n + alignment - 1) // alignment * alignment
                mine += padded[u]
            incl = T.alloc_var("int32", init=mine)
            for d in T.unroll(5):
                up = T.shfl_up(incl, 1 << d)
                if lane >= (1 << d):
                    incl += up
            if lane == 31:
                warp_sum[w] = incl
            start = T.alloc_var("int32", init=incl - mine)
            for v in T.unroll(WARPS):
                start += T.if_then_else(v < w, warp_sum[v], 0)
            for u in T.unroll(per_thread):
                e = tx * per_thread + u
                if e < E:
                    offsets[e] = start
                    if b == 0:
                        expert_offsets[e] = start
                start += padded[u]
            if (b == 0) & (tx == 32 * WARPS - 1):
                expert_offsets[E] = start  # the last thread ends at the grand total

            # Per-warp running row of each expert in this chunk.
            cnt = T.alloc_shared((WARPS, e_max), "int32")
            for i in T.serial(T.ceildiv(E, 32)):
                e = i * 32 + lane
                if e < E:
                    cnt[w, e] = offsets[e] + T.if_then_else(c < NC, chunk_counts[c, e], 0)
            lt = (T.uint32(1) << T.cast(lane, "uint32")) - T.uint32(1)
            for i in T.unroll(CHUNK // 32):
                e = ev[i]
                valid = (e >= 0) & (e < E)
                # Dropped entries get a key no other lane has (experts are >= 0).
                key = T.if_then_else(valid, e, -1 - lane)
                peers = T.alloc_var(
                    "uint32",
                    init=T.call_extern("uint32", "__match_any_sync", T.uint32(0xFFFFFFFF), key),
                )
                p = T.alloc_var("int32", init=-1)
                if valid:
                    p = cnt[w, e] + T.cast(T.popcount(peers & lt), "int32")
                T.sync_warp()
                # The highest lane of a group moves the counter past the whole group.
                if valid & ((peers >> T.cast(lane, "uint32")) == T.uint32(1)):
                    cnt[w, e] = p + 1
                T.sync_warp()
                g = c * CHUNK + i * 32 + lane
                if g < Tn * K:
                    flat_pos[g] = p

    @T.macro
    def pad_kernel(x_sorted, x_sorted_scale, expert_offsets, expert_counts, alignment):
        # Zero rows [offsets[e] + count[e], offsets[e + 1]): PAD_ROWS rows per block. With
        # alignment 1 the grid is empty and the launcher skips the kernel.
        with T.Kernel(T.ceildiv(alignment - 1, PAD_ROWS), E, threads=COPY_THREADS) as (q, e):
            tx = T.get_thread_binding()
            wait_then_release()
            first = T.alloc_var("int32", init=expert_offsets[e] + expert_counts[e] + q * PAD_ROWS)
            end = T.alloc_var("int32", init=T.min(expert_offsets[e + 1], P))
            for r in T.serial(PAD_ROWS):
                if first + r < end:
                    zero_row(x_sorted, first + r, tx)
                    if fp8:
                        for i in T.serial(T.ceildiv(G, COPY_THREADS)):
                            if i * COPY_THREADS + tx < G:
                                x_sorted_scale[first + r, i * COPY_THREADS + tx] = T.float32(0)

    @T.macro
    def copy_kernel(x, x_scale, token_pos, x_sorted, x_sorted_scale):
        # One block per (token, 16 KB of its row): read once, stored to each of its K rows.
        with T.Kernel(Tn, T.ceildiv(H, chunk), threads=COPY_THREADS) as (t, c):
            tx = T.get_thread_binding()
            copy_chunk(x, x_scale, x_sorted, x_sorted_scale, token_pos, t, c, tx)

    if fp8:

        @T.prim_func
        def moe_expand(
            x: T.Tensor((Tn, H), dtype),
            x_scale: T.Tensor((Tn, G), "float32"),
            idx: T.Tensor((Tn, K), "int32"),
            x_sorted: T.Tensor((P, H), dtype),
            x_sorted_scale: T.Tensor((P, G), "float32"),
            expert_offsets: T.Tensor((E + 1,), "int32"),
            token_pos: T.Tensor((Tn, K), "int32"),
            chunk_counts: T.Tensor((NC, E), "int32"),
            expert_counts: T.Tensor((E,), "int32"),
            alignment: T.int32,
        ):
            count_kernel(idx, chunk_counts)
            scan_kernel(chunk_counts, expert_counts)
            rank_kernel(idx, expert_offsets, token_pos, chunk_counts, expert_counts, alignment)
            pad_kernel(x_sorted, x_sorted_scale, expert_offsets, expert_counts, alignment)
            copy_kernel(x, x_scale, token_pos, x_sorted, x_sorted_scale)

        return moe_expand

    @T.prim_func
    def moe_expand(
        x: T.Tensor((Tn, H), dtype),
        idx: T.Tensor((Tn, K), "int32"),
        x_sorted: T.Tensor((P, H), dtype),
        expert_offsets: T.Tensor((E + 1,), "int32"),
        token_pos: T.Tensor((Tn, K), "int32"),
        chunk_counts: T.Tensor((NC, E), "int32"),
        expert_counts: T.Tensor((E,), "int32"),
        alignment: T.int32,
    ):
        count_kernel(idx, chunk_counts)
        scan_kernel(chunk_counts, expert_counts)
        rank_kernel(idx, expert_offsets, token_pos, chunk_counts, expert_counts, alignment)
        pad_kernel(x_sorted, None, expert_offsets, expert_counts, alignment)
        copy_kernel(x, None, token_pos, x_sorted, None)

    return moe_expand


def _row_ops(T, H, K, P, G, vec: int, unroll: int, dtype: str, fp8: bool, cuda: bool, pdl: bool):
    """Macros copying one chunk of a row of x to its K rows of x_sorted, and zeroing one chunk
    of a row of x_sorted.

    Thread-level code: a chunk is ``COPY_THREADS * unroll`` runs of ``vec`` elements, each
    thread moving ``unroll`` runs (``vec`` = one 16-byte vector, or 1 for the unaligned bf16
    path). The chunk is loaded once into registers and stored K times. The token's row
    numbers are staged through shared memory, ``COPY_THREADS`` slots at a time (all loaded at
    once, overlapping the row load), so the store loop never waits on them. For fp8 the
    blocks of chunk 0 also copy the token's scales. With ``pdl`` the copy waits for the
    previous kernel (which wrote ``pos``) between the row load and the first read of ``pos``.
    """
    chunk = COPY_THREADS * vec * unroll
    # Whole 16-byte vectors (not the scalar path) leave in one explicit st.global.v4 each:
    # TileLang's `*(uint4*)(x_sorted + ...) = ...` came out of NVRTC 12.9 and nvcc 13 (sm_90a)
    # with one of a row's eight vectors as four 4-byte STGs. Measured on an H200, bf16 E256
    # a16: 1164.3 -> 1159.8 us; e4m3 a128 649.3 -> 646.0 ("Session 5" of the tuning record).
    store_128 = cuda and vec * ITEMSIZE[dtype] == 16  # inline PTX: CUDA only

    @T.macro
    def copy(x, xsc, xs, xss, pos, t, c, tx):
        frag = T.alloc_local((unroll * vec,), dtype)
        if store_128:  # the fragment as uint32 words, 4 per 16-byte vector
            frag_bits = T.view(frag, (unroll * 4,), "uint32")
        tile = T.alloc_shared((COPY_THREADS,), "int32")
        for u in T.unroll(unroll):
            col = c * chunk + (u * COPY_THREADS + tx) * vec
            if col < H:
                for v in T.vectorized(vec):
                    frag[u * vec + v] = x[t, col + v]
        if pdl:
            T.pdl_sync()
        for kt in T.serial(T.ceildiv(K, COPY_THREADS)):
            j = kt * COPY_THREADS + tx
            tile[tx] = T.if_then_else(j < K, pos[t, j], -1)
            for s in T.serial(T.min(K - kt * COPY_THREADS, COPY_THREADS)):
                p = T.alloc_var("int32", init=tile[s])
                if (p >= 0) & (p < P):
                    for u in T.unroll(unroll):
                        col = c * chunk + (u * COPY_THREADS + tx) * vec
                        if col < H:
                            if store_128:  # the same 16 bytes, as one st.global.v4
                                T.stg128(xs[p, col], frag_bits.vload([u * 4], "uint32x4"))
                            else:
                                for v in T.vectorized(vec):
                                    xs[p, col + v] = frag[u * vec + v]
                    if fp8:
                        if c == 0:
                            for i in T.serial(T.ceildiv(G, COPY_THREADS)):
                                if i * COPY_THREADS + tx < G:
                                    xss[p, i * COPY_THREADS + tx] = xsc[t, i * COPY_THREADS + tx]

    @T.macro
    def zero(xs, row, c, tx):
        for u in T.unroll(unroll):
            col = c * chunk + (u * COPY_THREADS + tx) * vec
            if col < H:
                for v in T.vectorized(vec):
                    xs[row, col + v] = T.cast(0, dtype)

    return copy, zero


def rows_needed(tokens: int, slots: int, experts: int, alignment: int) -> int:
    """Rows of x_sorted allocated for a call: the most any routing can fill."""
    return tokens * slots + experts * (alignment - 1)


def reference(x, idx, num_experts: int, alignment: int = 16, x_scale=None):
    """torch reference, exact: ``(x_sorted, expert_offsets, token_pos, x_sorted_scale)``.

    ``x_sorted`` has ``rows_needed(...)`` rows; padding rows and the unused tail are zero
    (the kernel leaves the tail, rows >= expert_offsets[-1], unwritten). ``x_sorted_scale``
    is None without ``x_scale``. Entries of ``idx`` outside ``[0, num_experts)`` are dropped.
    """
    import torch

    t, k = idx.shape
    e = num_experts
    flat = idx.reshape(-1).long().cpu()
    valid = (flat >= 0) & (flat < e)
    keys = torch.where(valid, flat, torch.full_like(flat, e))  # dropped entries sort last
    counts = torch.bincount(keys, minlength=e + 1)[:e]
    padded = (counts + alignment - 1) // alignment * alignment
    offsets = torch.zeros(e + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(padded, 0)
    starts = torch.zeros(e + 1, dtype=torch.long)  # first entry of each expert, sorted order
    starts[1:] = torch.cumsum(counts, 0)
    order = torch.sort(keys, stable=True).indices  # by expert, then (token, slot)
    sorted_keys = keys[order]
    live = sorted_keys < e
    rank = torch.arange(flat.numel()) - starts[sorted_keys]
    pos = torch.full_like(flat, -1)
    pos[order[live]] = offsets[sorted_keys[live]] + rank[live]
    rows = rows_needed(t, k, e, alignment)
    dev = x.device
    x_sorted = torch.zeros(rows, x.shape[1], dtype=x.dtype, device=dev)
    src = torch.arange(flat.numel()) // max(k, 1)
    dst, src = pos[valid].to(dev), src[valid].to(dev)
    # Copy through a byte view: indexing fp8 tensors is not supported everywhere; bytes are exact.
    x_sorted.view(torch.uint8)[dst] = x.view(torch.uint8)[src]
    scale_sorted = None
    if x_scale is not None:
        scale_sorted = torch.zeros(rows, x_scale.shape[1], dtype=x_scale.dtype, device=dev)
        scale_sorted[dst] = x_scale[src]
    return x_sorted, offsets.int().to(dev), pos.view(t, k).int().to(dev), scale_sorted


def _constraints(key, spec) -> dict[str, int]:
    return {"H": GROUP} if key["dtype"] == "float8_e4m3fn" else {}


SPEC = KernelSpec(
    op="moe_expand",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({}, *({"E": e} for e in SPEC_E)),
    reference=reference,
    constraints=_constraints,
    doc="x_sorted[token_pos[t, j]] = x[t], rows grouped by expert idx[t, j], groups padded "
    "to a multiple of alignment; expert_offsets[E + 1]; fp8 scales carried along.",
)
