"""Top-k expert gate for MoE routing, with TileKernels' ranking and NaN rules.

For each token ``t`` (a row of ``scores[T, E]``, float32)::

    rank[t, :]    = scores[t, :]                              (scoring="softmax")
                  | sigmoid(scores[t, :]) in float32          (scoring="sigmoid")
    idx[t, :]     = the k experts with the largest rank, by descending rank; equal ranks go
                    to the smaller expert index, NaN ranks above everything (+inf included)
    weights[t, :] = softmax(scores[t, :])[idx]   (softmax, over all E experts)
                  | rank[t, idx]                 (sigmoid)
                    divided by their sum over the k picks, clamped to at least 1e-20, when
                    renormalize is set

This is TileKernels 1.0.0's routing (``tile_kernels.torch.top2_sum_gate`` without bias,
groups, scaling or shared experts: softmax ranks the logits, sigmoid ranks the float32
sigmoid, which saturates, so large logits tie and go to the smaller index; the order is its
``stable_topk``, a stable descending ``torch.sort``). The float32 sigmoid is torch's formula
``1 / (1 + expf(-x))`` with IEEE division, as torch computes it on CUDA. NaN scores propagate
into the weights as in torch (a softmax row holding a NaN or +inf is all NaN).

Kernel: ``L`` lanes per token (8 for a static E <= 256, 16 for a larger or the generic one),
``V <= 32`` scores per lane in registers, ``128 / L`` tokens per 128-thread block. Lane ``l``'s
slot ``j`` holds expert ``(j // W) * W * L + l * W + j % W``: W-wide loads (``W = 4``: 16 bytes
where 4 divides a static E, else 2 or 1) that read each row coalesced, once. A static E is any
expert count up to 512 (8, 60, 160, 384 ...): slots past E hold -inf (``_layout``). The
float path below (the keyed selection's fallback) compares exact IEEE floats, nothing packed
or rounded.

1. Each lane fills a cache with its best ``C = 4`` (value, expert) pairs, best first: C passes
   of (fmax tree, first slot equal to it, that slot set to NaN, which fmax skips).
2. Round ``r`` (k rounds): the token's maximum is a butterfly of fmax over the lanes' cache
   heads; the winner is the smallest expert index among heads equal to it (a butterfly of
   int min: the tie rule); the winning lane pops its head; lane ``r % L`` records pick ``r``.
   A lane whose cache runs empty refills it from its remaining scores (a warp-uniform branch,
   rare: with 8 lanes a token's 8 picks seldom hit one lane 5 times).
3. Weights on the lanes holding the picks, from their scores re-read: softmax ``exp(s - max)``
   over the sum of the k picks (renormalize) or of all E (summed before the selection);
   sigmoid the ranked value, divided by its sum over the picks if asked. float32 with
   ``expf`` and IEEE division: within 1e-6 relative of a float64 reference.

What is ranked (``load``): softmax the score, a NaN held as +inf and flagged; sigmoid the
sigmoid, a NaN held as 2 (above every sigmoid value). A flagged NaN wins a tie at +inf: its
slot goes first in a lane's fill, and its cached index is lowered by ``NAN_TIE`` for the
index-min (restored when recorded). The keyed path gives a NaN the key bits ``NAN_KEY``, a
bucket above +inf's.

Why the cache: the work that scales with V (fmax tree, slot search, NaN write) is done C times
per lane instead of once per round for every lane, and a round is then two 3-step butterflies
and a few selects, shared by 4 tokens per warp. Almost every instruction is a compare, min/max
or select (half-rate ALU pipe), so instruction count is what sets the time: about 290 warp
instructions per token at E = 256, k = 8 (sm_90a SASS), ~18 us for 32768 tokens on an H200
if the ALU pipe is the limit; the 32 MB of scores take ~8 us and overlap. ``MIN_BLOCKS`` caps
registers at 64 (no spills) so 32 warps per SM hide the shuffle latency of the rounds.

``k`` is the outputs' width, a runtime size (``1 <= k <= min(32, E)``; lane ``l`` records
picks ``l, l + L, ...``): one kernel serves every k, at the cost of a loop counter per round.
``renormalize`` is a runtime int32 flag; ``scoring`` is part of the key.
The generic variant (E dynamic, ``E <= 512``) reads scalars; slots past E hold a score of -inf,
whose experts come after every real one (ties go to the smaller index and ``k <= E``).

Keyed selection (``KEYED = True``, what ships: 26.6 -> 19.0 us softmax and 26.7 -> 19.3 us
sigmoid at T = 32768, E = 256, k = 8 on an H200, bit-identical outputs; bench/results/
2026-11-29-h200-tuning.md, "Session 4"). The float path above is its fallback, and all of
the kernel with ``KEYED = False``. Each score becomes one uint32 key: its order-preserving
bits (NaN flagged as above, -0 as +0; sign bit flipped for x >= 0, all bits for x < 0) with the low
``B`` bits (enough for E - 1) replaced by ``~expert``. Keys are unique in a token and order
like (score, then the smaller expert), except between scores that differ only in those B
bits (one bucket, ``key >> B``).

1. A compare-exchange network gives each lane its best C keys, sorted: groups of C sorted by
   Batcher's network, each max-merged into the running best and the bitonic result sorted
   (~4.5 integer min/max per score, once, instead of ~5 compares/selects per score per
   pass). A refill ranks ``key - floor`` (wrapping; floor = the last key cached), which puts
   the keys below the floor on top, in order.
2. A round is one max butterfly on the lanes' heads; the owner of the winning key pops it.
   The expert is the key's low bits; its score is re-read from memory for the weights.
3. Exact when a token's k + 1 best keys (the extra one marks the cut) lie in k + 1 buckets.
   Otherwise, if no score of the warp has nonzero low B bits (bfloat16-valued scores, whose
   buckets hold equal scores that the keys order by expert), the keys stand; else the warp
   reloads its rows and redoes them on the float path (randn rows: under 1 warp in 100).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from types import SimpleNamespace

from ..ceildiv import ceildiv
from ..spec import ALL_CUDA_SAME, KernelSpec

DTYPES = ("float32",)
SCORINGS = ("softmax", "sigmoid")
STATIC_E = (64, 128, 256)
MAX_E = 512
MAX_K = 32  # TileKernels' top2_sum_gate allows num_topk <= 32
THREADS = 128
STATIC_LANES = 8  # lanes per token with a static E <= 256 (16 above): V <= 32 slots per lane
GENERIC_LANES = 16  # generic E: 16 lanes x 32 slots cover E <= 512
MIN_BLOCKS = 8  # per SM: caps registers at 64 per thread (occupancy 50 %)
CACHE = 4  # cached (value, expert) pairs per lane
NO_INDEX = 1 << 30  # above every expert index: the identity of the index-min butterfly
NAN_TIE = 1 << 20  # float path: subtracted from a NaN score's expert index (wins +inf ties)
NAN_KEY = 0xFFC00000  # keyed path: a NaN score's key bits, one bucket above +inf (0xFF800000)
KEYED = True  # select on packed uint32 keys (see "Keyed selection" above); False: float path


def factory(arch: str, dtype: str, scoring: str, E: int | None = None):
    """TileLang prim_func ``(scores[M, E] f32, idx[M, K] i32, weights[M, K] f32, renorm: i32)``.

    ``arch`` does not change the code (shuffles, votes and float math on every target).
    """
    if dtype not in DTYPES or scoring not in SCORINGS:
        raise ValueError(f"topk_gate: unsupported key {dtype!r}, {scoring!r}")
    problem = spec_error({"dtype": dtype, "scoring": scoring}, {} if E is None else {"E": E})
    if problem:
        raise ValueError(f"topk_gate: {problem}")
    if KEYED and CACHE & (CACHE - 1):
        raise ValueError(f"topk_gate: KEYED needs a power-of-two CACHE; got {CACHE}")
    return _kernel(scoring, E)


def spec_error(key, spec) -> str | None:
    """Why a specialisation cannot be built (None if it can): a static E is any expert count
    ``1 <= E <= 512``. Checked by the factory and, before tracing, by config tools."""
    e = spec.get("E")
    if e is not None and (not isinstance(e, int) or not 0 < e <= MAX_E):
        return f"a static E must be an expert count 1 <= E <= {MAX_E}; got {e!r}"
    return None


def _layout(e: int | None) -> tuple[int, int, int]:
    """(lanes per token L, slots per lane V, chunk width W) for a static E or the generic one.

    A static E is read in chunks of W = 4, 2 or 1 consecutive experts (the largest that
    divides E: aligned vector loads); lanes * V covers E, slots past it hold -inf scores.
    """
    if e is None:
        return GENERIC_LANES, MAX_E // GENERIC_LANES, 1
    lanes = STATIC_LANES if e <= STATIC_LANES * 32 else GENERIC_LANES
    width = 4 if e % 4 == 0 else 2 if e % 2 == 0 else 1
    return lanes, -(-e // (lanes * width)) * width, width


def _tree(op, items):
    """A balanced expression tree: short dependency chains for the unrolled per-lane work."""
    while len(items) > 1:
        pairs = range(0, len(items) - 1, 2)
        items = [op(items[i], items[i + 1]) for i in pairs] + items[len(items) & ~1 :]
    return items[0]


def _tie_bits(e: int | None) -> int:
    """Low key bits that hold the expert index (KEYED): enough for the largest expert a lane
    holds, padding slots past E included."""
    lanes, slots, _ = _layout(e)
    return max(1, (lanes * slots - 1).bit_length())


def _sort_pairs(lo: int, n: int):
    """Compare-exchange pairs (i, j), i < j, that sort positions lo .. lo + n - 1 (n a power
    of two) when each moves the larger value to i: Batcher's odd-even merge sort."""
    if n > 1:
        yield from _sort_pairs(lo, n // 2)
        yield from _sort_pairs(lo + n // 2, n // 2)
        yield from _merge_pairs(lo, n, 1)


def _merge_pairs(lo: int, n: int, r: int):
    """Pairs that merge the two sorted halves of lo .. lo + n - 1, at stride r."""
    if 2 * r < n:
        yield from _merge_pairs(lo, n, 2 * r)  # the even positions, then the odd ones
        yield from _merge_pairs(lo + r, n, 2 * r)
        yield from ((i, i + r) for i in range(lo + r, lo + n - r, 2 * r))
    else:
        yield (lo, lo + r)


def _bitonic_pairs(n: int) -> list[tuple[int, int]]:
    """Pairs that sort a bitonic sequence of n (a power of two) positions, larger first."""
    strides = [n >> s for s in range(1, n.bit_length())]
    return [(i, i + d) for d in strides for i in range(n) if not i & d]


def _groups(slots: int) -> list[list[int | None]]:
    """The slots in groups of CACHE for the keyed network; None pads the last group."""
    size = -(-slots // CACHE) * CACHE
    return [[j if j < slots else None for j in range(a, a + CACHE)] for a in range(0, size, CACHE)]


def _keyed_macros(e: int | None, K):
    """The keyed selection's pieces (KEYED), as a namespace of macros and expressions.

    Key layout (uint32): the score's order-preserving bits (sign bit flipped for x >= 0, all
    bits flipped for x < 0; -0 first made +0) with the low B = _tie_bits(e) bits replaced by
    ~expert, so a larger key is a larger score or, within one bucket (key >> B), a smaller
    expert. 0 is below every key: the empty cache entry.
    """
    import tilelang.language as T
    from tilelang import tvm

    lanes, slots, width = _layout(e)
    steps = [lanes >> (s + 1) for s in range(lanes.bit_length() - 1)]
    mask = (1 << _tie_bits(e)) - 1
    sort_pairs, merge_pairs = list(_sort_pairs(0, CACHE)), _bitonic_pairs(CACHE)
    entries = list(range(CACHE))  # a list: a Python loop over it unrolls while tracing
    FLOOR, DRY, LAST, NEAR = range(4)  # fields of `state`

    def u32(x):
        return tvm.tirx.const(x, "uint32")

    def slot_bits(j):
        """The expert bits set by slot j (the lane sets the others)."""
        return (j // width) * (width * lanes) + j % width

    @T.macro
    def pack(key, v, nm, lane):
        """key[j] = the key of rank value v[j] held by `lane`'s slot j; a slot whose bit is set
        in `nm` (a NaN score, held as +inf in v) gets the bucket above +inf's."""
        # (u | mask) - expert puts ~expert in the low bits (nothing borrows): one add
        # of the lane's and the slot's part of the expert index.
        lane_bits = T.cast(lane * width, "uint32")
        for j in T.unroll(slots):
            x = T.ieee_add(v[j], T.float32(0))  # -0 + 0 = +0: the two zeros tie
            neg = T.cast(T.reinterpret(x, "int32") >> 31, "uint32")
            u = T.reinterpret(x, "uint32") ^ (neg | u32(0x80000000))
            u = T.if_then_else(((nm >> j) & u32(1)) != u32(0), u32(NAN_KEY), u)
            key[j] = (u | u32(mask)) - lane_bits - T.cast(slot_bits(j), "uint32")

    @T.macro
    def exchange(net, i, j):
        """net[i], net[j] = max, min (the scratch slot 2 * CACHE holds the old net[i])."""
        net[2 * CACHE] = net[i]
        net[i] = T.max(net[2 * CACHE], net[j])
        net[j] = T.min(net[2 * CACHE], net[j])

    @T.macro
    def fill(key, kc, net, state, need, refill):
        """kc = this lane's best CACHE keys, best first (0 past the last); with `refill`,
        only keys below state[FLOOR], only on lanes with `need`.

        The network: each group of CACHE keys is sorted, then max-merged into the running
        best (net[:CACHE]) and the bitonic result sorted. A refill ranks key - floor
        (wrapping): keys below the floor come out above every other one, in order.
        """
        for gi, members in enumerate(_groups(slots)):
            base = 0 if gi == 0 else CACHE
            for i, j in enumerate(members):
                if j is None:
                    net[base + i] = u32(0)
                elif refill:
                    net[base + i] = key[j] - state[FLOOR]
                else:
                    net[base + i] = key[j]
            for a, b in sort_pairs:
                exchange(net, base + a, base + b)
            if gi > 0:
                for i in entries:
                    net[i] = T.max(net[i], net[2 * CACHE - 1 - i])
                for a, b in merge_pairs:
                    exchange(net, a, b)
        for p in entries:
            if refill:
                got = net[p] + state[FLOOR]
                kc[p] = T.if_then_else(need, T.if_then_else(got < state[FLOOR], got, u32(0)), kc[p])
            else:
                kc[p] = net[p]
        # A lane that found fewer than CACHE is spent; the last key cached is the next floor.
        state[DRY] = T.if_then_else(need & (kc[CACHE - 1] == u32(0)), u32(1), state[DRY])
        state[FLOOR] = T.if_then_else(need, kc[CACHE - 1], state[FLOOR])

    @T.macro
    def best_key(key, kc, net, state, best):
        """best[0] = the token's best cached key, after refilling drained lanes; state[NEAR]
        keeps the smallest xor of two consecutive best keys (< 2**B: one bucket)."""
        if T.any_sync((kc[0] == u32(0)) & (state[DRY] == u32(0))):  # some lane ran out
            fill(key, kc, net, state, (kc[0] == u32(0)) & (state[DRY] == u32(0)), True)
        best[0] = kc[0]
        for s in steps:
            best[0] = T.max(best[0], T.shfl_xor(best[0], s))
        state[NEAR] = T.min(state[NEAR], best[0] ^ state[LAST])
        state[LAST] = best[0]

    @T.macro
    def start(key, kc, net, state):
        """The first fill; state = (floor, dry, last best: none, smallest xor: none)."""
        for f in T.unroll(NEAR):
            state[f] = u32(0)
        state[NEAR] = u32(0xFFFFFFFF)
        fill(key, kc, net, state, True, False)

    def shared_bucket(state):
        """Whether two consecutive best keys so far lie in one bucket (may be misordered)."""
        return state[NEAR] <= u32(mask)

    def expert_of(key):
        """The expert index a key holds (int32)."""
        return T.cast(~key & u32(mask), "int32")

    def lost_bits(x):
        """The score bits a key drops (int32; 0 for bfloat16-valued scores)."""
        return T.reinterpret(T.ieee_add(x, T.float32(0)), "int32") & mask

    return SimpleNamespace(
        pack=pack,
        start=start,
        best_key=best_key,
        shared_bucket=shared_bucket,
        expert_of=expert_of,
        lost_bits=lost_bits,
    )


def _kernel(scoring: str, e: int | None):
    import tilelang.language as T
    from tilelang import tvm

    lanes, slots, width = _layout(e)
    tokens = THREADS // lanes  # tokens per block
    picks = MAX_K // lanes  # picks recorded per lane
    steps = [lanes >> (s + 1) for s in range(lanes.bit_length() - 1)]  # butterfly offsets
    M = T.dynamic("M")
    K = T.dynamic("K")
    E = T.dynamic("E") if e is None else e
    nan = tvm.tirx.const(float("nan"), "float32")
    neg_inf = -T.infinity("float32")
    zero, one = T.float32(0), T.float32(1)

    def expert(slot, lane):
        """Expert index held in `slot` (an int or an int32 expression) of `lane`."""
        return (slot // width) * (width * lanes) + lane * width + slot % width

    def add(a, b):
        return a + b

    def sigmoid(x):
        """torch's float32 sigmoid formula, IEEE: 1 / (1 + expf(-x)); NaN stays NaN."""
        return T.ieee_fdiv(one, one + T.exp(-x))

    def nan_tie(nm, slot):
        """NAN_TIE for a slot (int32 expression) whose score was NaN (softmax), else 0."""
        if scoring != "softmax":
            return 0
        bit = (nm >> T.cast(T.min(slot, slots - 1), "uint32")) & T.uint32(1)
        return T.cast(bit, "int32") * NAN_TIE

    @T.macro
    def fill(v, nm, cv, ci, best, slot, dry, lane, need):
        """Move this lane's best CACHE (value, expert) pairs from v into the empty cache.

        Lanes with `need` false run the same instructions (the warp stays converged for
        the caller's shuffles) but change nothing. Passes past k are skipped. Softmax: among
        equal values (+inf) a NaN score's slot goes first, and its cached index is lowered by
        NAN_TIE so that it also wins the round's index-min against other lanes' +inf.
        """
        for p in T.unroll(CACHE):
            if p < K:
                best[0] = _tree(T.max, [v[j] for j in range(slots)])  # NaN if v is spent
                slot[0] = slots
                for jj in T.unroll(slots):  # descending select chain: the first slot wins
                    slot[0] = T.if_then_else(v[slots - 1 - jj] == best[0], slots - 1 - jj, slot[0])
                if scoring == "softmax":  # a NaN slot (held as +inf) before an equal +inf
                    for jj in T.unroll(slots):
                        j = slots - 1 - jj
                        hit = (v[j] == best[0]) & (((nm >> j) & T.uint32(1)) != T.uint32(0))
                        slot[0] = T.if_then_else(hit, j, slot[0])
                cv[p] = T.if_then_else(need, best[0], cv[p])
                ci[p] = T.if_then_else(need, expert(slot[0], lane) - nan_tie(nm, slot[0]), ci[p])
                for j in T.unroll(slots):
                    v[j] = T.if_then_else(need & (slot[0] == j), nan, v[j])
        # Fewer than CACHE found: v is spent and never needs another pass.
        dry[0] = T.if_then_else(need & T.isnan(cv[CACHE - 1]), 1, dry[0])

    @T.macro
    def load(scores, v, nm, row, lane):
        """v = the rank values of this lane's scores of `row` (slots past a generic E hold a
        score of -inf). Softmax ranks the score, NaN as +inf with its bit set in nm[0]; sigmoid
        ranks sigmoid(score), NaN as 2 (above every sigmoid value)."""
        if e is None:
            for j in T.unroll(slots):
                col = j * lanes + lane
                v[j] = T.if_then_else(col < E, scores[row, T.min(col, E - 1)], neg_inf)
        else:
            for c in T.unroll(slots // width):
                if (c + 1) * width * lanes <= e:  # every lane's chunk is inside the row
                    for q in T.vectorized(width):
                        v[c * width + q] = scores[row, c * width * lanes + lane * width + q]
                else:  # the last chunk: lanes past E hold -inf (E % width == 0: all or none)
                    for q in T.unroll(width):
                        col = c * width * lanes + lane * width + q
                        v[c * width + q] = T.if_then_else(
                            col < E, scores[row, T.min(col, E - 1)], neg_inf
                        )
        nm[0] = T.uint32(0)
        for j in T.unroll(slots):
            if scoring == "softmax":
                nm[0] = nm[0] | (T.cast(T.isnan(v[j]), "uint32") << j)
                v[j] = T.if_then_else(T.isnan(v[j]), -neg_inf, v[j])
            else:
                v[j] = T.if_then_else(T.isnan(v[j]), T.float32(2), sigmoid(v[j]))

    @T.macro
    def exact_select(v, nm, cv, ci, pv, pi, best, slot, dry, lane, g: T.Ref, win: T.Ref):
        """The float path: cache fill, then k rounds of (fmax butterfly, index-min butterfly)."""
        for p in T.unroll(CACHE):
            cv[p] = nan
            ci[p] = NO_INDEX
        for q in T.unroll(picks):
            pv[q] = zero
            pi[q] = 0
        dry[0] = 0
        fill(v, nm[0], cv, ci, best, slot, dry, lane, True)
        for r in T.serial(T.min(K, MAX_K)):
            if T.any_sync(T.isnan(cv[0]) & (dry[0] == 0)):  # some lane's cache ran out
                fill(v, nm[0], cv, ci, best, slot, dry, lane, T.isnan(cv[0]) & (dry[0] == 0))
            g = cv[0]
            for s in steps:
                g = T.max(g, T.shfl_xor(g, s))
            # The smallest expert index holding the maximum: the tie rule.
            win = T.if_then_else(cv[0] == g, ci[0], NO_INDEX)
            for s in steps:
                win = T.min(win, T.shfl_xor(win, s))
            for q in T.unroll(picks):
                if r == q * lanes + lane:
                    pv[q] = g
                    pi[q] = win
            if ci[0] == win:  # pop the head (one lane per token)
                for p in T.unroll(CACHE - 1):
                    cv[p] = cv[p + 1]
                    ci[p] = ci[p + 1]
                cv[CACHE - 1] = nan
                ci[CACHE - 1] = NO_INDEX
        if scoring == "softmax":
            for q in T.unroll(picks):
                pi[q] = pi[q] & (NAN_TIE - 1)  # a NaN's index lowered by NAN_TIE

    kz = _keyed_macros(e, K)

    @T.macro
    def keyed_select(
        scores, v, nm, cv, ci, pv, pi, best, slot, dry, lane, row, g: T.Ref, win: T.Ref
    ):
        """The keyed path (KEYED): pi from packed keys. The float path
        redoes the warp's tokens when two of some token's k + 1 best keys share a bucket and a
        score of the warp has bits the keys dropped."""
        key = T.alloc_local((slots,), "uint32")  # this lane's keys (see _keyed_macros)
        kc = T.alloc_local((CACHE,), "uint32")  # cached keys, best first; 0 = empty
        net = T.alloc_local((2 * CACHE + 1,), "uint32")  # network scratch
        pk = T.alloc_local((picks,), "uint32")  # keys of picks r = q * lanes + lane
        state = T.alloc_local((4,), "uint32")  # refill floor, dry, last best, smallest xor
        kbest = T.alloc_local((1,), "uint32")
        lost = T.alloc_local((1,), "int32")
        kz.pack(key, v, nm[0], lane)
        kz.start(key, kc, net, state)
        for q in T.unroll(picks):
            pk[q] = T.uint32(0)
        for r in T.serial(T.min(K, MAX_K)):
            kz.best_key(key, kc, net, state, kbest)
            for q in T.unroll(picks):
                if r == q * lanes + lane:
                    pk[q] = kbest[0]
            if kc[0] == kbest[0]:  # pop the head (keys are unique: one lane per token)
                for p in T.unroll(CACHE - 1):
                    kc[p] = kc[p + 1]
                kc[CACHE - 1] = T.uint32(0)
        kz.best_key(key, kc, net, state, kbest)  # the (k + 1)-th key: where the cut falls
        for q in T.unroll(picks):
            pi[q] = kz.expert_of(pk[q])
        if T.any_sync(kz.shared_bucket(state)):
            load(scores, v, nm, row, lane)
            lost[0] = _tree(T.bitwise_or, [kz.lost_bits(v[j]) for j in range(slots)])
            if T.any_sync(lost[0] != 0):
                exact_select(v, nm, cv, ci, pv, pi, best, slot, dry, lane, g, win)

    @T.prim_func
    def topk_gate(
        scores: T.Tensor((M, E), "float32"),
        idx: T.Tensor((M, K), "int32"),
        weights: T.Tensor((M, K), "float32"),
        renorm: T.int32,
    ):
        with T.Kernel(ceildiv(T, M, tokens), threads=THREADS) as bx:
            T.annotate_min_blocks_per_sm(MIN_BLOCKS)
            tx = T.get_thread_binding()
            lane = tx % lanes
            tok = bx * tokens + tx // lanes
            # Past-the-end tokens of the last block redo the last row (never stored): every
            # lane runs the same code, so shuffles and votes always see the full warp.
            row = T.min(tok, M - 1)
            v = T.alloc_local((slots,), "float32")  # scores not yet cached; NaN = moved out
            cv = T.alloc_local((CACHE,), "float32")  # cache values, best first; NaN = empty
            ci = T.alloc_local((CACHE,), "int32")  # their experts
            pv = T.alloc_local((picks,), "float32")  # picks r = q * lanes + lane
            pi = T.alloc_local((picks,), "int32")
            w = T.alloc_local((picks,), "float32")
            best = T.alloc_local((1,), "float32")
            slot = T.alloc_local((1,), "int32")
            dry = T.alloc_local((1,), "int32")
            nm = T.alloc_local((1,), "uint32")  # softmax: slots whose score is NaN
            top = T.alloc_var("float32")  # the token's maximum score
            total = T.alloc_var("float32")  # the weights' denominator
            g = T.alloc_var("float32")
            win = T.alloc_var("int32")
            load(scores, v, nm, row, lane)
            total = one
            if scoring == "softmax":
                if renorm == 0:
                    # The sum over all E scores, before the cache fill moves them out (NaN
                    # if the row holds a NaN or +inf, as torch.softmax).
                    top = _tree(T.max, [v[j] for j in range(slots)])
                    for s in steps:
                        top = T.max(top, T.shfl_xor(top, s))
                    total = _tree(add, [T.exp(v[j] - top) for j in range(slots)])
                    for s in steps:
                        total = total + T.shfl_xor(total, s)
            if KEYED:
                keyed_select(scores, v, nm, cv, ci, pv, pi, best, slot, dry, lane, row, g, win)
            else:
                exact_select(v, nm, cv, ci, pv, pi, best, slot, dry, lane, g, win)
            for q in T.unroll(picks):  # the picks' scores, re-read (NaN kept)
                col = T.min(pi[q], E - 1)  # pi is garbage past k: keep the (unused) read in the row
                pv[q] = T.if_then_else(q * lanes + lane < K, scores[row, col], zero)
            if scoring == "softmax":
                top = T.shfl_sync(pv[0], 0, lanes)  # pick 0 (lane 0 of the token): the maximum
            for q in T.unroll(picks):
                if scoring == "softmax":
                    w[q] = T.exp(pv[q] - top)
                else:
                    w[q] = sigmoid(pv[q])  # the value it was ranked by
                w[q] = T.if_then_else(q * lanes + lane < K, w[q], zero)
            if renorm != 0:
                total = _tree(add, [w[q] for q in range(picks)])
                for s in steps:
                    total = total + T.shfl_xor(total, s)
                # TileKernels' clamp(min=1e-20) of the sum; NaN stays NaN (no fmax)
                total = T.if_then_else(total < T.float32(1e-20), T.float32(1e-20), total)
            for q in T.unroll(picks):
                if (tok < M) & (q * lanes + lane < K):
                    idx[tok, q * lanes + lane] = pi[q]
                    weights[tok, q * lanes + lane] = T.ieee_fdiv(w[q], total)

    return topk_gate


def reference(scores, k: int, scoring: str = "softmax", renormalize: bool = True):
    """torch reference, TileKernels' semantics: exact indices, float64 weights rounded to
    float32.

    Ranks the float32 scores (softmax) or ``torch.sigmoid`` of them (sigmoid: float32, so
    large logits saturate to equal values) by a stable descending sort: ties go to the
    smaller expert index and NaN ranks above everything, as TileKernels' ``stable_topk``.
    Weights: ``softmax(scores)`` (float64, over all E experts) or the ranked sigmoid values,
    at the picks; with ``renormalize`` divided by their sum clamped to at least 1e-20 (NaN
    stays NaN), as TileKernels' ``top2_sum_gate``.
    """
    import torch

    s = scores.float()
    rank = torch.sigmoid(s) if scoring == "sigmoid" else s
    idx = torch.sort(rank, dim=-1, descending=True, stable=True).indices[:, :k]
    if scoring == "softmax":
        w = torch.softmax(s.double(), dim=-1).gather(-1, idx)
    else:
        w = rank.gather(-1, idx).double()
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True).clamp(min=1e-20)
    return idx.to(torch.int32), w.float()


SPEC = KernelSpec(
    op="topk_gate",
    factory=factory,
    keys=tuple({"dtype": d, "scoring": s} for d in DTYPES for s in SCORINGS),
    specs=({}, *({"E": e} for e in STATIC_E)),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    spec_error=spec_error,
    doc="idx, weights = top-k experts of scores[T, E] (ties: smaller index) with softmax or "
    "sigmoid weights, optionally renormalised over the k picks.",
)
