"""MoE token dispatch: group the rows of x by expert (op "moe_expand").

Given ``idx[T, K]`` (the expert of each (token, slot); -1 or any value outside ``[0, E)`` means
"dropped"), the entries are ordered by expert, then token, then slot. Expert ``e`` owns rows
``[offsets[e], offsets[e + 1])`` of ``x_sorted``: first its ``count[e]`` entries, then zero rows
up to a multiple of ``alignment``. ``token_pos[t, j]`` is the row holding (t, j), or -1::

    offsets[0] = 0, offsets[e + 1] = offsets[e] + ceil(count[e] / alignment) * alignment
    x_sorted[token_pos[t, j]] = x[t]          (and x_sorted_scale likewise for fp8)

``x_sorted`` has ``P = T*K + E*(alignment - 1)`` rows, the most any routing can use, so the host
never waits for the counts; rows at or past ``offsets[E]`` are not written.

Four kernels, run in order on one stream (one prim_func, several ``T.Kernel`` blocks; the
generated launcher keeps their order). An entry is (t, j), flattened to ``g = t*K + j``; the
entries are cut into chunks of ``CHUNK`` consecutive ones, each handled by one warp (32 entries
per lane, all loaded up front into registers):

1. count: per chunk, a shared-memory histogram over experts → ``chunk_counts[c, e]``.
2. scan: per expert, an exclusive prefix over the chunks (in place) and the total
   ``expert_counts[e]``. A block of 32 warps covers 32 experts, each warp a run of chunks.
3. rank: one block per window (a few consecutive chunks, one warp each). It scans the padded
   totals (the offsets; block 0 writes ``expert_offsets``) and the window's own counts per
   expert, then each warp walks its chunk 32 entries at a time in order: ``__match_any_sync``
   groups equal experts, the rank among them is a popcount of the lower lanes, and a per-warp
   shared counter per expert (started at offsets[e] + chunk prefix) advances. Positions are
   therefore deterministic: ascending token, then slot, inside each expert. Each entry also
   gets a slot in ``work`` (the copy's work list, one slot per entry): the window's slots
   hold its entries ordered by expert, then row; slots of dropped entries (at the window's
   end) hold -1.
4. copy: each block takes a few consecutive slots of ``work`` and 16 KB of their rows: it
   loads the pieces of x (16-byte vectors, in registers), then stores them to their rows of
   x_sorted; block column 0 also copies the fp8 scales. Blocks past the work list zero the
   padding rows, ``PAD_ROWS`` rows each (none with alignment 1).

Why a work list instead of one block per token storing its row K times: the copy writes 8 of
every 9 bytes, and DRAM writes are fastest when the blocks in flight write near one another.
Scattering a token's row to its K experts keeps every one of the E expert regions of x_sorted
open at once (with top-k over 256 experts: 85 % of copy bandwidth, against 90 % for the same
kernel writing ascending rows). Walking a window's entries expert by expert writes one or two
regions at a time; the window's rows of x (256 tokens, 3.5 MB at H = 7168 bf16) are read K
times, from L2 after the first (L2_HINTS keeps them there): 92 % of copy on an H200
(bench/results/2026-11-29-h200-tuning.md, "Session 7").

On sm_90+ the kernels chain by programmatic dependent launch (``PDL`` below): each starts
while its predecessor finishes and waits for it before reading what it wrote.

The copy reads x once from DRAM and writes each routed row once: bandwidth-bound by design.
Kernels 1-3 touch only the int32 metadata (a few MB at most).

Dtypes: bf16 (vectorised when ``H % 8 == 0``, scalar otherwise) and OCP e4m3fn with
per-128-column fp32 scales (``H % 128 == 0``). Rows are copied as bytes: bit-exact, NaN
payloads included. Thread-level code throughout (``T.vectorized`` runs of exactly 16 bytes, no
``T.Parallel``): TileLang 0.1.15 would emit 32-byte accesses on sm_100a for wider runs, and
layout inference of tile loops made tracing several times slower.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..spec import SPLIT_AT_SM90, KernelSpec

DTYPES = ("bfloat16", "float8_e4m3fn")
ITEMSIZE = {"bfloat16": 2, "float8_e4m3fn": 1}
GROUP = 128  # fp8: columns per scale
E_MAX = 1024  # generic variant: largest number of experts
SPEC_E = (64, 128, 256)

WARPS = 4  # count kernel: warps per block, one chunk each
CHUNK = 1024  # entries per chunk: 32 per lane
# The copy walks the entries window by window (bf16: WINDOW_CHUNKS chunks, 256 tokens at K =
# 8; fp8: twice as many), in each window expert by expert: its writes stay in a few expert
# regions of x_sorted at a time while the window's rows of x are read from L2 (see the module
# docstring). One rank block per window, one warp per chunk.
WINDOW_CHUNKS = 2
SCAN_WARPS = 32  # scan kernel: 32 warps (chunk runs) x 32 lanes (experts) per block
COPY_THREADS = 128
# bf16: 16-byte vectors per thread per row chunk (8: a chunk is 16 KB, rows up to 8192 in one
# block; fp8 takes half as many per row and twice the rows); unused vectors of shorter rows are
# skipped.
COPY_UNROLL = 8
COPY_ROWS = 2  # bf16 work-list slots (rows) per copy block: all their loads before a store
SCALAR_STEP = 8  # unaligned bf16 rows: elements per thread between loads and stores
PAD_ROWS = 8  # padding rows zeroed per padding block
# PDL: programmatic dependent launch between the four kernels (sm_90 and newer only; older
# targets and HIP keep plain stream order). A kernel waits for its predecessor before touching
# anything it wrote, and only then lets its own successor launch, so each wait also covers
# every kernel before it. Work done before the wait reads only idx, which no kernel of the op
# writes: the rank kernel's idx loads (the copy needs the work list before it can load a row).
# The count kernel never waits, so it still starts after all earlier work on the stream.
# Measured on an H200 with the earlier copy, which loaded its row before the wait (bench/tune.py,
# T = 32768, H = 7168, E = 256): 1167.7 -> 1164.3 us bf16 a16, 652.9 -> 649.3 us e4m3 a128
# (bench/results/2026-11-29-h200-tuning.md, "Session 5").
PDL = True

# The copy's 16-byte loads and stores on CUDA, with L2 eviction hints: x is read evict-last (the
# window's other experts read the same rows again from L2), x_sorted written evict-first (this
# op never reads it back), so the written rows do not push the window's rows of x out of L2.
# Measured on an H200 (bf16, T = 32768, H = 7168, K = 8, E = 256, copy kernels alone):
# windowed gather 1128 us plain, 1069 us with both hints; scattering each token to its K rows
# as before, 1152 us (bench/results/2026-11-29-h200-tuning.md, "Session 7"). Before sm_80
# (no createpolicy) the same accesses without hints. TileLang 0.1.15 has no hinted ld/st, so
# the two functions are C++ placed in the kernel source by T.import_source.
L2_HINTS = r"""
__device__ __forceinline__ void tileaot_load_keep(void *dst, const void *src) {
  unsigned int a, b, c, d;
#if __CUDA_ARCH__ >= 800
  unsigned long long policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(src), "l"(policy));
#else
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(src));
#endif
  unsigned int *out = (unsigned int *)dst;
  out[0] = a; out[1] = b; out[2] = c; out[3] = d;
}
__device__ __forceinline__ void tileaot_store_stream(void *dst, const void *src) {
  const unsigned int *in = (const unsigned int *)src;
#if __CUDA_ARCH__ >= 800
  unsigned long long policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
               :: "l"(dst), "r"(in[0]), "r"(in[1]), "r"(in[2]), "r"(in[3]), "l"(policy)
               : "memory");
#else
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
               :: "l"(dst), "r"(in[0]), "r"(in[1]), "r"(in[2]), "r"(in[3]) : "memory");
#endif
}
"""


def factory(arch: str, dtype: str, E: int | None = None):
    """TileLang prim_func, tensors in call order, then the alignment scalar::

        x[T, H], (x_scale[T, H/128] fp8 only), idx[T, K] int32,
        x_sorted[P, H], (x_sorted_scale[P, H/128]), expert_offsets[E + 1] int32,
        token_pos[T, K] int32, chunk_counts[ceil(T*K / 1024), E] int32 (scratch),
        expert_counts[E] int32 (scratch), work[T * K] int32 (scratch), alignment: int32

    ``arch`` does not change the code, except that PDL (sm_90+) and the L2-hinted 16-byte
    accesses of the copy (inline PTX, L2_HINTS) apply to CUDA targets only.
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
    # Windows of the same bytes of x for both dtypes: WINDOW_CHUNKS chunks for bf16, twice as
    # many for fp8 (its rows are half as long).
    wchunks = WINDOW_CHUNKS * 2 // ITEMSIZE[dtype]
    window = wchunks * CHUNK  # entries (slots of the work list) per window
    per_thread = -(-e_max // (32 * wchunks))  # experts per thread in the rank's scans
    Tn = T.dynamic("T")
    H = T.dynamic("H")
    K = T.dynamic("K")
    P = T.dynamic("P")
    E = T.dynamic("E") if e_static is None else e_static
    NC = (Tn * K + CHUNK - 1) // CHUNK
    G = H // GROUP

    # Per copy block: `rows` slots, `chunk` elements of each (16 KB bf16 / 8 KB fp8 rows, 2 / 4
    # rows): the same bytes in flight and registers for both dtypes.
    rows = COPY_ROWS * 2 // ITEMSIZE[dtype]
    unroll = COPY_UNROLL * ITEMSIZE[dtype] // 2
    chunk = COPY_THREADS * vec * unroll
    cuda = arch.startswith("sm_")
    # griddepcontrol needs sm_90 (TileLang refuses PDL calls when lowering for older targets);
    # HIP has none.
    pdl = PDL and cuda and int(arch[3:].rstrip("af")) >= 90
    vec_copy, vec_zero = _row_ops(T, H, P, rows, vec, unroll, dtype, cuda)
    scalar_copy, scalar_zero = _row_ops(T, H, P, rows, 1, vec * unroll, dtype, cuda)

    @T.macro
    def copy_chunk(x, xs, src, dst, c, tx):
        if fp8:  # H % 128 == 0 (a constraint): rows always start 16-byte aligned
            T.assume(H % vec == 0)
            vec_copy(x, xs, src, dst, c, tx)
        elif H % vec == 0:  # bf16: 16-byte vectors while rows stay aligned, scalars otherwise
            T.assume(H % vec == 0)
            vec_copy(x, xs, src, dst, c, tx)
        else:
            scalar_copy(x, xs, src, dst, c, tx)

    @T.macro
    def zero_chunk(xs, row, c, tx):
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
    def expert_scan(vals, dst, lane, w, tx):
        # Exclusive scan over the experts of `vals` (thread tx holds experts
        # [tx * per_thread, (tx + 1) * per_thread)) into shared dst[e]; dst[E] gets the total.
        warp_sum = T.alloc_shared((wchunks,), "int32")
        mine = T.alloc_var("int32", init=0)
        for u in T.unroll(per_thread):
            mine += vals[u]
        incl = T.alloc_var("int32", init=mine)
        for d in T.unroll(5):
            up = T.shfl_up(incl, 1 << d)
            if lane >= (1 << d):
                incl += up
        if lane == 31:
            warp_sum[w] = incl
        start = T.alloc_var("int32", init=incl - mine)
        for v in T.unroll(wchunks):
            start += T.if_then_else(v < w, warp_sum[v], 0)
        for u in T.unroll(per_thread):
            e = tx * per_thread + u
            if e < E:
                dst[e] = start
            start += vals[u]
        if tx == 32 * wchunks - 1:
            dst[E] = start  # the last thread ends at the grand total

    @T.macro
    def rank_kernel(idx, expert_offsets, token_pos, chunk_counts, expert_counts, work, alignment):
        # Block b = window b: chunks [b * wchunks, (b + 1) * wchunks), one warp each.
        with T.Kernel(T.ceildiv(NC, wchunks), threads=32 * wchunks) as b:
            tx = T.get_thread_binding()
            w = tx // 32
            lane = tx % 32
            c = b * wchunks + w
            c0 = b * wchunks  # the window's first chunk
            flat = T.reshape(idx, (Tn * K,))
            flat_pos = T.reshape(token_pos, (Tn * K,))
            ev = T.alloc_local((CHUNK // 32,), "int32")
            for i in T.unroll(CHUNK // 32):  # issue the chunk's loads before the scans
                g = c * CHUNK + i * 32 + lane
                ev[i] = T.if_then_else(g < Tn * K, flat[g], -1)
            wait_then_release()  # the loads above read idx only

            # Two scans over the experts: the padded totals give the offsets (block 0 writes
            # expert_offsets); the window's own counts give where each expert's run starts in
            # the window's slots of the work list.
            padded = T.alloc_local((per_thread,), "int32")
            in_window = T.alloc_local((per_thread,), "int32")
            before = T.alloc_local((per_thread,), "int32")
            for u in T.unroll(per_thread):
                e = tx * per_thread + u
                n = T.if_then_else(e < E, expert_counts[e], 0)
                padded[u] = (n + alignment - 1) // alignment * alignment
                before[u] = T.if_then_else(e < E, chunk_counts[c0, e], 0)
                # the prefix after the window: the next window's, or the totals
                more = (e < E) & (c0 + wchunks < NC)
                after = T.if_then_else(more, chunk_counts[c0 + wchunks, e], n)
                in_window[u] = T.if_then_else(e < E, after - before[u], 0)
            offsets = T.alloc_shared((e_max + 1,), "int32")
            starts = T.alloc_shared((e_max + 1,), "int32")
            expert_scan(padded, offsets, lane, w, tx)
            expert_scan(in_window, starts, lane, w, tx)
            # slot of the entry at row p of expert e: p + shift[e]
            shift = T.alloc_shared((e_max,), "int32")
            for u in T.unroll(per_thread):
                e = tx * per_thread + u
                if e < E:
                    shift[e] = b * window + starts[e] - offsets[e] - before[u]
                    if b == 0:
                        expert_offsets[e] = offsets[e]
            if (b == 0) & (tx == 0):
                expert_offsets[E] = offsets[E]
            # Dropped entries leave the window's last slots empty: mark them.
            for i in T.serial(T.ceildiv(window, 32 * wchunks)):
                s = b * window + starts[E] + i * 32 * wchunks + tx
                if (s < (b + 1) * window) & (s < Tn * K):
                    work[s] = -1

            # Per-warp running row of each expert in this chunk.
            cnt = T.alloc_shared((wchunks, e_max), "int32")
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
                    if valid:
                        work[p + shift[e]] = g

    @T.macro
    def pad_rows(x_sorted, x_sorted_scale, expert_offsets, expert_counts, e, q, c, tx):
        # Zero rows [offsets[e] + count[e], offsets[e + 1]): PAD_ROWS rows from the q-th.
        first = T.alloc_var("int32", init=expert_offsets[e] + expert_counts[e] + q * PAD_ROWS)
        end = T.alloc_var("int32", init=T.min(expert_offsets[e + 1], P))
        for r in T.serial(PAD_ROWS):
            if first + r < end:
                zero_chunk(x_sorted, first + r, c, tx)
                if fp8:
                    if c == 0:
                        for i in T.serial(T.ceildiv(G, COPY_THREADS)):
                            if i * COPY_THREADS + tx < G:
                                x_sorted_scale[first + r, i * COPY_THREADS + tx] = T.float32(0)

    @T.macro
    def copy_slots(x, x_scale, token_pos, work, x_sorted, x_sorted_scale, b, c, tx):
        # `rows` slots of the work list from slot b * rows: `chunk` elements of each row.
        if cuda:
            T.import_source(L2_HINTS)
        flat_pos = T.reshape(token_pos, (Tn * K,))
        src = T.alloc_local((rows,), "int32")  # the slot's token, or -1
        dst = T.alloc_local((rows,), "int32")  # its row of x_sorted
        for r in T.unroll(rows):
            s = b * rows + r
            g = T.alloc_var("int32", init=T.if_then_else(s < Tn * K, work[s], -1))
            src[r] = T.if_then_else(g >= 0, g // K, -1)
            dst[r] = T.if_then_else(g >= 0, flat_pos[g], -1)
        if fp8:  # the chunk's chunk / GROUP scales, one per thread, loaded with the row
            sc = T.alloc_local((rows,), "float32")
            col = c * (chunk // GROUP) + tx
            mine = (tx < chunk // GROUP) & (col < G)
            for r in T.unroll(rows):
                sc[r] = T.if_then_else(mine & (src[r] >= 0), x_scale[src[r], col], T.float32(0))
        copy_chunk(x, x_sorted, src, dst, c, tx)
        if fp8:
            for r in T.unroll(rows):
                if mine & (src[r] >= 0) & (dst[r] >= 0) & (dst[r] < P):
                    x_sorted_scale[dst[r], col] = sc[r]

    @T.macro
    def copy_kernel(x, xsc, token_pos, work, xs, xss, expert_offsets, expert_counts, alignment):
        # Blocks [0, slot_blocks) copy the work list's slots, the E * pad_blocks after them
        # zero the padding rows (none with alignment 1); blockIdx.y: `chunk` elements of a row.
        slot_blocks = T.ceildiv(Tn * K, rows)
        pad_blocks = T.ceildiv(alignment - 1, PAD_ROWS)  # per expert
        grid = (slot_blocks + E * pad_blocks, T.ceildiv(H, chunk))
        with T.Kernel(*grid, threads=COPY_THREADS) as (b, c):
            tx = T.get_thread_binding()
            if pdl:  # work, token_pos and the offsets are the rank kernel's
                T.pdl_sync()
            if b < slot_blocks:
                copy_slots(x, xsc, token_pos, work, xs, xss, b, c, tx)
            else:
                e = (b - slot_blocks) // pad_blocks
                q = (b - slot_blocks) % pad_blocks
                pad_rows(xs, xss, expert_offsets, expert_counts, e, q, c, tx)

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
            work: T.Tensor((Tn * K,), "int32"),
            alignment: T.int32,
        ):
            count_kernel(idx, chunk_counts)
            scan_kernel(chunk_counts, expert_counts)
            rank_kernel(
                idx, expert_offsets, token_pos, chunk_counts, expert_counts, work, alignment
            )
            copy_kernel(
                x,
                x_scale,
                token_pos,
                work,
                x_sorted,
                x_sorted_scale,
                expert_offsets,
                expert_counts,
                alignment,
            )

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
        work: T.Tensor((Tn * K,), "int32"),
        alignment: T.int32,
    ):
        count_kernel(idx, chunk_counts)
        scan_kernel(chunk_counts, expert_counts)
        rank_kernel(idx, expert_offsets, token_pos, chunk_counts, expert_counts, work, alignment)
        copy_kernel(
            x, None, token_pos, work, x_sorted, None, expert_offsets, expert_counts, alignment
        )

    return moe_expand


def _row_ops(T, H, P, rows: int, vec: int, unroll: int, dtype: str, cuda: bool):
    """Macros copying one chunk of each of a block's rows of x to x_sorted, and zeroing one
    chunk of a row of x_sorted.

    Thread-level code: a chunk is ``COPY_THREADS * unroll`` runs of ``vec`` elements, each
    thread moving ``unroll`` runs (``vec`` = one 16-byte vector, or 1 for the unaligned bf16
    path). The 16-byte path loads the chunk of all ``rows`` rows first (x row ``src[r]``,
    skipped if -1), then stores them (x_sorted row ``dst[r]``); on CUDA through L2_HINTS. The
    scalar path goes row by row, 8 elements per thread at a time (it only has to be correct;
    few registers keep it from setting the kernel's count).
    """
    chunk = COPY_THREADS * vec * unroll

    def column(c, u, tx):
        return c * chunk + (u * COPY_THREADS + tx) * vec

    @T.macro
    def copy_vectors(x, xs, src, dst, c, tx):
        frag = T.alloc_local((rows * unroll * vec,), dtype)
        for r in T.unroll(rows):
            t = T.alloc_var("int32", init=src[r])
            if t >= 0:
                for u in T.unroll(unroll):
                    if column(c, u, tx) < H:
                        at = (r * unroll + u) * vec
                        if cuda:
                            T.evaluate(
                                T.call_extern(
                                    "void",
                                    "tileaot_load_keep",
                                    T.access_ptr(frag[at], "w"),
                                    T.access_ptr(x[t, column(c, u, tx)], "r"),
                                )
                            )
                        else:
                            for v in T.vectorized(vec):
                                frag[at + v] = x[t, column(c, u, tx) + v]
        for r in T.unroll(rows):
            p = T.alloc_var("int32", init=dst[r])
            if (p >= 0) & (p < P):
                for u in T.unroll(unroll):
                    if column(c, u, tx) < H:
                        at = (r * unroll + u) * vec
                        if cuda:
                            T.evaluate(
                                T.call_extern(
                                    "void",
                                    "tileaot_store_stream",
                                    T.access_ptr(xs[p, column(c, u, tx)], "w"),
                                    T.access_ptr(frag[at], "r"),
                                )
                            )
                        else:
                            for v in T.vectorized(vec):
                                xs[p, column(c, u, tx) + v] = frag[at + v]

    @T.macro
    def copy_scalars(x, xs, src, dst, c, tx):
        vals = T.alloc_local((SCALAR_STEP,), dtype)
        for r in T.serial(rows):
            t = T.alloc_var("int32", init=src[r])
            p = T.alloc_var("int32", init=dst[r])
            if (t >= 0) & (p >= 0) & (p < P):
                for q in T.serial(unroll // SCALAR_STEP):
                    for u in T.unroll(SCALAR_STEP):
                        if column(c, q * SCALAR_STEP + u, tx) < H:
                            vals[u] = x[t, column(c, q * SCALAR_STEP + u, tx)]
                    for u in T.unroll(SCALAR_STEP):
                        if column(c, q * SCALAR_STEP + u, tx) < H:
                            xs[p, column(c, q * SCALAR_STEP + u, tx)] = vals[u]

    @T.macro
    def zero(xs, row, c, tx):
        for u in T.unroll(unroll):
            if column(c, u, tx) < H:
                for v in T.vectorized(vec):
                    xs[row, column(c, u, tx) + v] = T.cast(0, dtype)

    return (copy_vectors if vec > 1 else copy_scalars), zero


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
    lowering_classes=SPLIT_AT_SM90,
    lowering_reason="its kernels chain with PDL from sm_90 on; nothing else depends on the arch",
    constraints=_constraints,
    doc="x_sorted[token_pos[t, j]] = x[t], rows grouped by expert idx[t, j], groups padded "
    "to a multiple of alignment; expert_offsets[E + 1]; fp8 scales carried along.",
)
