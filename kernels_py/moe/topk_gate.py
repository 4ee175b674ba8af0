"""Top-k expert gate for MoE routing (DeepSeek-V3 style).

For each token ``t`` (a row of ``scores[T, E]``, float32)::

    idx[t, :]     = the k experts with the largest scores, by descending score; equal scores
                    go to the smaller expert index (deterministic on every GPU)
    weights[t, :] = softmax(scores[t, :])[idx]   (scoring="softmax", over all E experts)
                  | sigmoid(scores[t, idx])      (scoring="sigmoid")
                    divided by their sum over the k picks when renormalize is set

Selection uses the raw scores: softmax and sigmoid are increasing, so this is the order of
the probabilities, without the ties their float32 rounding would create. A NaN score counts
as -inf (for the selection and the weights). A row of -inf scores gives NaN softmax weights,
as torch.softmax does.

Kernel: ``L`` lanes per token (8 for a static E, 16 for the generic one), ``V = E / L`` scores
per lane in registers, ``128 / L`` tokens per 128-thread block. Lane ``l``'s slot ``j`` holds
expert ``(j // W) * W * L + l * W + j % W``: 16-byte loads (``W = 4``) that read each row
coalesced, once. All compares are exact IEEE float compares (nothing packed or rounded).

1. Each lane fills a cache with its best ``C = 4`` (value, expert) pairs, best first: C passes
   of (fmax tree, first slot equal to it, that slot set to NaN, which fmax skips).
2. Round ``r`` (k rounds): the token's maximum is a butterfly of fmax over the lanes' cache
   heads; the winner is the smallest expert index among heads equal to it (a butterfly of
   int min: the tie rule); the winning lane pops its head; lane ``r % L`` records pick ``r``.
   A lane whose cache runs empty refills it from its remaining scores (a warp-uniform branch,
   rare: with 8 lanes a token's 8 picks seldom hit one lane 5 times).
3. Weights on the lanes holding the picks: softmax ``exp(s - max)`` over the sum of the k picks
   (renormalize) or of all E (summed before the selection); sigmoid computed from
   ``exp(-|s|)`` (overflows for neither sign), divided by its sum over the picks if asked.
   float32 with ``expf`` and IEEE division: within 1e-6 relative of a float64 reference.

Why the cache: the work that scales with V (fmax tree, slot search, NaN write) is done C times
per lane instead of once per round for every lane, and a round is then two 3-step butterflies
and a few selects, shared by 4 tokens per warp. Almost every instruction is a compare, min/max
or select (half-rate ALU pipe), so instruction count is what sets the time: about 290 warp
instructions per token at E = 256, k = 8 (sm_90a SASS), ~18 us for 32768 tokens on an H200
if the ALU pipe is the limit; the 32 MB of scores take ~8 us and overlap. ``MIN_BLOCKS`` caps
registers at 64 (no spills) so 32 warps per SM hide the shuffle latency of the rounds.

``k`` is the outputs' width, a runtime size (``1 <= k <= min(16, E)``; lane ``l`` records
picks ``l, l + L, ...``): one kernel serves every k, at the cost of a loop counter per round.
``renormalize`` is a runtime int32 flag; ``scoring`` is part of the key.
The generic variant (E dynamic, ``E <= 512``) reads scalars; slots past E hold -inf, whose
experts come after every real one (ties go to the smaller index and ``k <= E``).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..spec import KernelSpec

DTYPES = ("float32",)
SCORINGS = ("softmax", "sigmoid")
STATIC_E = (64, 128, 256)
MAX_E = 512
MAX_K = 16
THREADS = 128
STATIC_LANES = 8  # lanes per token with a static E: V = E / 8 scores per lane
GENERIC_LANES = 16  # generic E: 16 lanes x 32 slots cover E <= 512
MIN_BLOCKS = 8  # per SM: caps registers at 64 per thread (occupancy 50 %)
CACHE = 4  # cached (value, expert) pairs per lane
NO_INDEX = 1 << 30  # above every expert index: the identity of the index-min butterfly


def factory(arch: str, dtype: str, scoring: str, E: int | None = None):
    """TileLang prim_func ``(scores[M, E] f32, idx[M, K] i32, weights[M, K] f32, renorm: i32)``.

    ``arch`` does not change the code (shuffles, votes and float math on every target).
    """
    if dtype not in DTYPES or scoring not in SCORINGS:
        raise ValueError(f"topk_gate: unsupported key {dtype!r}, {scoring!r}")
    if E is not None and (E % (4 * STATIC_LANES) or not 0 < E <= MAX_E):
        raise ValueError(f"topk_gate: a static E must be a multiple of 32 up to 512; got {E}")
    return _kernel(scoring, E)


def _layout(e: int | None) -> tuple[int, int, int]:
    """(lanes per token L, slots per lane V, chunk width W) for a static E or the generic one."""
    if e is None:
        return GENERIC_LANES, MAX_E // GENERIC_LANES, 1
    return STATIC_LANES, e // STATIC_LANES, 4


def _tree(op, items):
    """A balanced expression tree: short dependency chains for the unrolled per-lane work."""
    while len(items) > 1:
        pairs = range(0, len(items) - 1, 2)
        items = [op(items[i], items[i + 1]) for i in pairs] + items[len(items) & ~1 :]
    return items[0]


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

    @T.macro
    def fill(v, cv, ci, best, slot, dry, lane, need):
        """Move this lane's best CACHE (value, expert) pairs from v into the empty cache.

        Lanes with `need` false run the same instructions (the warp stays converged for
        the caller's shuffles) but change nothing. Passes past k are skipped.
        """
        for p in T.unroll(CACHE):
            if p < K:
                best[0] = _tree(T.max, [v[j] for j in range(slots)])  # NaN if v is spent
                slot[0] = slots
                for jj in T.unroll(slots):  # descending select chain: the first slot wins
                    slot[0] = T.if_then_else(v[slots - 1 - jj] == best[0], slots - 1 - jj, slot[0])
                cv[p] = T.if_then_else(need, best[0], cv[p])
                ci[p] = T.if_then_else(need, expert(slot[0], lane), ci[p])
                for j in T.unroll(slots):
                    v[j] = T.if_then_else(need & (slot[0] == j), nan, v[j])
        # Fewer than CACHE found: v is spent and never needs another pass.
        dry[0] = T.if_then_else(need & T.isnan(cv[CACHE - 1]), 1, dry[0])

    @T.prim_func
    def topk_gate(
        scores: T.Tensor((M, E), "float32"),
        idx: T.Tensor((M, K), "int32"),
        weights: T.Tensor((M, K), "float32"),
        renorm: T.int32,
    ):
        with T.Kernel(T.ceildiv(M, tokens), threads=THREADS) as bx:
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
            top = T.alloc_var("float32")  # the token's maximum score
            total = T.alloc_var("float32")  # the weights' denominator
            g = T.alloc_var("float32")
            win = T.alloc_var("int32")
            if e is None:
                for j in T.unroll(slots):
                    col = j * lanes + lane
                    v[j] = T.if_then_else(col < E, scores[row, T.min(col, E - 1)], neg_inf)
            else:
                for c in T.unroll(slots // width):
                    for q in T.vectorized(width):
                        v[c * width + q] = scores[row, c * width * lanes + lane * width + q]
            for j in T.unroll(slots):
                v[j] = T.max(v[j], neg_inf)  # fmax: NaN becomes -inf
            total = one
            if scoring == "softmax":
                if renorm == 0:
                    # The sum over all E scores, before the cache fill moves them out.
                    top = _tree(T.max, [v[j] for j in range(slots)])
                    for s in steps:
                        top = T.max(top, T.shfl_xor(top, s))
                    total = _tree(add, [T.exp(v[j] - top) for j in range(slots)])
                    for s in steps:
                        total = total + T.shfl_xor(total, s)
            for p in T.unroll(CACHE):
                cv[p] = nan
                ci[p] = NO_INDEX
            for q in T.unroll(picks):
                pv[q] = zero
                pi[q] = 0
            dry[0] = 0
            fill(v, cv, ci, best, slot, dry, lane, True)
            if scoring == "softmax":
                top = cv[0]
                for s in steps:
                    top = T.max(top, T.shfl_xor(top, s))
            for r in T.serial(T.min(K, MAX_K)):
                if T.any_sync(T.isnan(cv[0]) & (dry[0] == 0)):  # some lane's cache ran out
                    fill(v, cv, ci, best, slot, dry, lane, T.isnan(cv[0]) & (dry[0] == 0))
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
            for q in T.unroll(picks):
                if scoring == "softmax":
                    w[q] = T.exp(pv[q] - top)
                else:
                    small = T.exp(-T.abs(pv[q]))  # a sigmoid that overflows for neither sign
                    w[q] = T.ieee_fdiv(T.if_then_else(pv[q] >= zero, one, small), one + small)
                w[q] = T.if_then_else(q * lanes + lane < K, w[q], zero)
            if renorm != 0:
                total = _tree(add, [w[q] for q in range(picks)])
                for s in steps:
                    total = total + T.shfl_xor(total, s)
            for q in T.unroll(picks):
                if (tok < M) & (q * lanes + lane < K):
                    idx[tok, q * lanes + lane] = pi[q]
                    weights[tok, q * lanes + lane] = T.ieee_fdiv(w[q], total)

    return topk_gate


def reference(scores, k: int, scoring: str = "softmax", renormalize: bool = True):
    """torch reference: exact indices, float64 weights rounded to float32.

    Ties go to the smaller expert index by a stable sort (torch.topk makes no such promise);
    NaN scores count as -inf.
    """
    import torch

    s = scores.float()
    s = torch.where(torch.isnan(s), torch.full_like(s, float("-inf")), s)
    idx = torch.sort(s, dim=-1, descending=True, stable=True).indices[:, :k]
    s64 = s.double()
    p = torch.softmax(s64, dim=-1) if scoring == "softmax" else torch.sigmoid(s64)
    w = p.gather(-1, idx)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return idx.to(torch.int32), w.float()


SPEC = KernelSpec(
    op="topk_gate",
    factory=factory,
    keys=tuple({"dtype": d, "scoring": s} for d in DTYPES for s in SCORINGS),
    specs=({}, *({"E": e} for e in STATIC_E)),
    reference=reference,
    doc="idx, weights = top-k experts of scores[T, E] (ties: smaller index) with softmax or "
    "sigmoid weights, optionally renormalised over the k picks.",
)
