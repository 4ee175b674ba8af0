"""DeepSeek-V3's router: sigmoid scores, a selection bias, group-limited top-k (op "top2_sum_gate").

TileKernels 1.0.0's ``top2_sum_gate`` (``tile_kernels/torch/topk.py``), for each token ``t`` (a
row of ``logits[T, E]``, float32) and its options::

    score[e]   = sigmoid(logits[t, e])                   float32, torch's formula
    biased[e]  = score[e] + bias[e]                      float32: what the selection ranks
    groups     (when n_group != topk_group): the E experts in n_group groups of E / n_group
               consecutive experts; a group's rank value is the float32 sum of its two largest
               biased scores; the topk_group best groups stay (stable descending sort: ties to
               the smaller group, NaN first), every other expert's biased score becomes -inf
    idx[t, :k] = the k best experts of the (masked) biased scores, stable descending order:
               equal values to the smaller expert index, NaN above everything (+inf included)
    w[t, :k]   = score[idx] / max(sum(score[idx]), 1e-20) * routed_scaling_factor
    shared     columns k .. k + S - 1: expert E + j with weight 1.0 (shared experts as routed)
    EP/TP      each index i >= 0 (shared ones too), with R = E // num_ep_ranks experts per rank:
               -1 unless (i // R) % num_tp == tp_rank, else i' = i - tp_rank * R,
               i' - (i' // (R * num_tp)) * (R * num_tp - R)  (TileKernels' local numbering)

The weights of indices masked to -1 are kept (as TileKernels). NaN logits rank first and make
their token's weights NaN (the sum is NaN); TileKernels' own kernel refuses NaN/inf logits with a
device assert, its reference orders them as here.

Kernel: one warp per token, 4 tokens per 128-thread block (a past-the-end token redoes the last
row and stores nothing, so every shuffle sees a full warp). Lane ``l`` holds ``V`` slots: for a
static E experts ``l * V .. l * V + V - 1`` (``V = ceil(E / 32)``; loaded as 16-, 8- or 4-byte
vectors, whichever divides V and E), for the generic E (<= 512) experts ``j * 32 + l``; slots
past E get a key below every real one (``PAD``). Each slot becomes an int32 order key (the float's
bits made monotone: ``b ^ ((b >> 31) & 0x7fffffff)``, -0 as +0, every NaN as INT32_MAX), so
all comparisons are integer ones and a key maps back to its float exactly.

1. Groups (runtime ``n_group > 0``): for each group, every lane keeps the top two keys of its
   slots in the group (int max/min), a 5-step butterfly merges the pairs, and lane ``g`` keeps
   ``key(value(top1) + value(top2))``. Where each group is a power-of-two number of whole
   lanes (a static E's contiguous slots: DeepSeek-V3's 256 / 8 groups are 4 lanes of 8), one
   pass does every group at once (each lane's top two, merged over its group's lanes, lane
   ``g`` reading group ``g``'s first lane): about 50 operations per token instead of 580
   (counted in the generated source; not measured yet). Lane ``g`` counts the groups ranked
   above its own (a shuffle per group); the kept groups form a bitmask (butterfly OR), and
   slots of the other groups get the key of -inf.
2. Top-k (runtime k): k rounds of (each lane's best slot: the first largest key, slots in
   ascending expert order; a 5-step butterfly argmax with the smaller expert winning ties; lane
   ``r`` records pick ``r``; the winner's slot is set to INT32_MIN, below every key).
3. Lane ``r < k`` re-reads ``logits[t, idx[r]]`` for its weight; a butterfly sum gives the
   denominator (its order differs from torch's sum: weights agree to an ulp, as TileKernels'
   tests compare them, with ``torch.allclose``); lanes ``k .. P - 1`` write the shared experts.

Not here (TileKernels options): softmax and sqrtsoftplus scoring (``scoring`` is part of the key
so they can join), ``mask``, ``fix_routing_mask``, ``to_physical_map``/``logical_count`` (hence
no ``ep_rank``: it only picks a duplicate there) and ``unmapped_topk_idx``. Indices are int32
(TileKernels' are int64): what moe_expand takes.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..spec import ALL_CUDA_SAME, KernelSpec
from .order_key import INT_MIN, key, value

DTYPES = ("float32",)
SCORINGS = ("sigmoid",)
# The zoo's expert counts routed this way: GLM-4.5 (160), DeepSeek-V3/V3.2 (256, 8 groups of
# which 4 stay), Kimi-K2 (384) (examples/models/*.json).
STATIC_E = (160, 256, 384)
MAX_E = 512  # the generic variant's slots: 16 per lane
MAX_P = 32  # output columns (k + shared experts): one lane each
MAX_GROUPS = 32  # one lane per group
THREADS = 128
WARP = 32
PAD = INT_MIN + 1  # key of a slot past E: below key(-inf), above a picked slot's INT_MIN
NO_INDEX = 1 << 30  # above every expert index: the argmax's identity


def factory(arch: str, dtype: str, scoring: str, E: int | None = None):
    """TileLang prim_func ``(logits[M, E] f32, bias[E] f32, idx[M, P] i32, weights[M, P] f32,
    k, n_group, topk_group, per_rank, tp_rank, num_tp: i32, scale: f32)``.

    ``arch`` does not change the code (shuffles and float math on every target).
    """
    if dtype not in DTYPES or scoring not in SCORINGS:
        raise ValueError(f"top2_sum_gate: unsupported key {dtype!r}, {scoring!r}")
    problem = spec_error({"dtype": dtype, "scoring": scoring}, {} if E is None else {"E": E})
    if problem:
        raise ValueError(f"top2_sum_gate: {problem}")
    return _kernel(E)


def spec_error(key, spec) -> str | None:
    """Why a specialisation cannot be built (None if it can): a static E is any expert count
    ``2 <= E <= 512``. Checked by the factory and, before tracing, by config tools."""
    e = spec.get("E")
    if e is not None and (not isinstance(e, int) or not 2 <= e <= MAX_E):
        return f"a static E must be an expert count 2 <= E <= {MAX_E}; got {e!r}"
    return None


def _layout(e: int | None) -> tuple[int, int]:
    """(slots per lane V, vector width W) for a static E (contiguous) or the generic one."""
    if e is None:
        return MAX_E // WARP, 1
    slots = -(-e // WARP)
    width = next(w for w in (4, 2, 1) if slots % w == 0 and e % w == 0)
    return slots, width


def _kernel(e: int | None):
    import tilelang.language as T

    slots, width = _layout(e)
    tokens = THREADS // WARP
    steps = (16, 8, 4, 2, 1)
    M = T.dynamic("M")
    P = T.dynamic("P")
    E = T.dynamic("E") if e is None else e
    one = T.float32(1)
    neg_inf = -T.infinity("float32")

    def expert(j, lane):
        return j * WARP + lane if e is None else lane * slots + j

    def sigmoid(x):
        """torch's float32 sigmoid formula, IEEE division: 1 / (1 + expf(-x))."""
        return T.ieee_fdiv(one, one + T.exp(-x))

    @T.macro
    def load(logits, bias, v, b, row, lane):
        """v = this lane's logits, b = their biases (slots past E: -inf and 0)."""
        if e is None:
            for j in T.unroll(slots):
                col = expert(j, lane)
                v[j] = T.if_then_else(col < E, logits[row, T.min(col, E - 1)], neg_inf)
                b[j] = T.if_then_else(col < E, bias[T.min(col, E - 1)], T.float32(0))
        else:
            for c in T.unroll(slots // width):
                base = lane * slots + c * width
                if base < E:  # E % width == 0: a vector is all inside the row or all past it
                    for q in T.vectorized(width):
                        v[c * width + q] = logits[row, base + q]
                    for q in T.vectorized(width):
                        b[c * width + q] = bias[base + q]
                else:
                    for q in T.unroll(width):
                        v[c * width + q] = neg_inf
                        b[c * width + q] = T.float32(0)

    @T.macro
    def add_to_pair(pair, x):
        """pair = the top two (with multiplicity) of pair and key x."""
        pair[1] = T.max(pair[1], T.min(pair[0], x))
        pair[0] = T.max(pair[0], x)

    @T.macro
    def merge_pairs(pair, s):
        """pair = the top two of this lane's pair and lane (lane ^ s)'s."""
        a2 = T.shfl_xor(pair[0], s)
        b2 = T.shfl_xor(pair[1], s)
        pair[1] = T.max(T.max(pair[1], b2), T.min(pair[0], a2))
        pair[0] = T.max(pair[0], a2)

    @T.macro
    def group_keys_each(kk, lane, n_group, gid, pair, gkey):
        """gkey on lane g = key(sum of group g's top two keys' values): a pass per group."""
        for g in T.serial(n_group):
            pair[0] = INT_MIN  # the lane's largest key in group g
            pair[1] = INT_MIN  # its second largest (with multiplicity)
            for j in T.unroll(slots):
                add_to_pair(pair, T.if_then_else(gid[j] == g, kk[j], INT_MIN))
            for s in steps:
                merge_pairs(pair, s)
            total = T.ieee_add(value(pair[0]), value(pair[1]))
            gkey[0] = T.if_then_else(lane == g, key(total), gkey[0])

    @T.macro
    def group_keys_spanned(kk, lane, span, pair, gkey):
        """The same in one pass where each group is `span` whole lanes (a power of two; a
        static E's contiguous slots): a lane's top two, merged over the group's lanes only."""
        pair[0] = INT_MIN
        pair[1] = INT_MIN
        for j in T.unroll(slots):
            add_to_pair(pair, kk[j])
        for s in steps:
            if s < span:
                merge_pairs(pair, s)
        total = T.ieee_add(value(pair[0]), value(pair[1]))
        gkey[0] = T.shfl_sync(key(total), T.min(lane * span, WARP - 1))

    @T.macro
    def limit_groups(kk, lane, n_group, topk_group, gid, pair, gkey, cnt, kept):
        """Keys of experts outside the topk_group best groups (top-2 sums) become -inf's."""
        size = E // n_group
        for j in T.unroll(slots):
            col = expert(j, lane)
            gid[j] = T.if_then_else(col < E, col // size, -1)
        gkey[0] = INT_MIN
        if e is None:
            group_keys_each(kk, lane, n_group, gid, pair, gkey)
        else:
            span = size // slots
            if (size % slots == 0) & ((span & (span - 1)) == 0):
                group_keys_spanned(kk, lane, span, pair, gkey)
            else:
                group_keys_each(kk, lane, n_group, gid, pair, gkey)
        cnt[0] = 0  # groups ranked above lane's group: larger sum, or equal and smaller index
        for h in T.serial(n_group):
            o = T.shfl_sync(gkey[0], h)
            cnt[0] = cnt[0] + T.if_then_else((o > gkey[0]) | ((o == gkey[0]) & (h < lane)), 1, 0)
        kept[0] = T.if_then_else((lane < n_group) & (cnt[0] < topk_group), 1 << lane, 0)
        for s in steps:
            kept[0] = kept[0] | T.shfl_xor(kept[0], s)
        for j in T.unroll(slots):
            stays = (gid[j] >= 0) & (((kept[0] >> T.max(gid[j], 0)) & 1) != 0)
            kk[j] = T.if_then_else(stays, kk[j], key(neg_inf))

    @T.macro
    def select(kk, lane, k, best, pick):
        """pick[0] on lane r < k = the token's r-th expert (key order, ties: smaller index)."""
        pick[0] = 0
        for r in T.serial(k):
            best[0] = INT_MIN
            best[1] = NO_INDEX
            for j in T.unroll(slots):  # ascending experts: the first largest key wins ties
                better = kk[j] > best[0]
                best[1] = T.if_then_else(better, expert(j, lane), best[1])
                best[0] = T.if_then_else(better, kk[j], best[0])
            for s in steps:
                ok = T.shfl_xor(best[0], s)
                oi = T.shfl_xor(best[1], s)
                take = (ok > best[0]) | ((ok == best[0]) & (oi < best[1]))
                best[0] = T.if_then_else(take, ok, best[0])
                best[1] = T.if_then_else(take, oi, best[1])
            pick[0] = T.if_then_else(lane == r, best[1], pick[0])
            for j in T.unroll(slots):
                kk[j] = T.if_then_else(expert(j, lane) == best[1], INT_MIN, kk[j])

    def local_index(i, per_rank, tp_rank, num_tp):
        """TileKernels' EP/TP masking of expert index i >= 0: -1 or the local number."""
        per_dp = per_rank * num_tp
        here = i - tp_rank * per_rank
        mapped = here - (here // per_dp) * (per_dp - per_rank)
        on_rank = (i // per_rank) % num_tp == tp_rank
        return T.if_then_else(on_rank & (mapped >= 0), mapped, -1)

    @T.prim_func
    def top2_sum_gate(
        logits: T.Tensor((M, E), "float32"),
        bias: T.Tensor((E,), "float32"),
        idx: T.Tensor((M, P), "int32"),
        weights: T.Tensor((M, P), "float32"),
        k: T.int32,
        n_group: T.int32,
        topk_group: T.int32,
        per_rank: T.int32,
        tp_rank: T.int32,
        num_tp: T.int32,
        scale: T.float32,
    ):
        with T.Kernel(T.ceildiv(M, tokens), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            lane = tx % WARP
            tok = bx * tokens + tx // WARP
            row = T.min(tok, M - 1)
            v = T.alloc_local((slots,), "float32")
            b = T.alloc_local((slots,), "float32")
            kk = T.alloc_local((slots,), "int32")  # order keys of the biased scores
            gid = T.alloc_local((slots,), "int32")
            pair = T.alloc_local((2,), "int32")
            gkey = T.alloc_local((1,), "int32")
            cnt = T.alloc_local((1,), "int32")
            kept = T.alloc_local((1,), "int32")
            best = T.alloc_local((2,), "int32")
            pick = T.alloc_local((1,), "int32")
            w = T.alloc_var("float32")
            total = T.alloc_var("float32")
            out = T.alloc_var("int32")
            load(logits, bias, v, b, row, lane)
            for j in T.unroll(slots):  # slots past E: below every expert (key(-inf) included)
                biased = key(T.ieee_add(sigmoid(v[j]), b[j]))
                kk[j] = T.if_then_else(expert(j, lane) < E, biased, PAD)
            if n_group > 0:
                limit_groups(kk, lane, n_group, topk_group, gid, pair, gkey, cnt, kept)
            select(kk, lane, k, best, pick)
            w = T.float32(0)
            if lane < k:
                w = sigmoid(logits[row, T.min(pick[0], E - 1)])
            total = w
            for s in steps:
                total = total + T.shfl_xor(total, s)
            # TileKernels' clamp(min=1e-20) of the sum; NaN stays NaN
            total = T.if_then_else(total < T.float32(1e-20), T.float32(1e-20), total)
            if lane < k:
                w = T.ieee_fdiv(w, total) * scale
                out = pick[0]
            else:
                w = one
                out = E + lane - k
            if (tok < M) & (lane < P):
                idx[tok, lane] = local_index(out, per_rank, tp_rank, num_tp)
                weights[tok, lane] = w

    return top2_sum_gate


def reference(
    logits,
    bias,
    k: int,
    num_groups: int = 0,
    num_topk_groups: int = 0,
    routed_scaling_factor: float = 1.0,
    num_shared_experts: int = 0,
    num_ep_ranks: int = 1,
    tp_rank: int = 0,
    num_tp_ranks: int = 1,
):
    """torch reference, TileKernels' semantics (module docstring): int32 indices, float32
    weights, each step the float32 torch operation TileKernels' reference does."""
    import torch

    s = torch.sigmoid(logits.float())
    biased = s + bias.float()
    t, e = biased.shape
    if num_groups != num_topk_groups:
        grouped = biased.view(t, num_groups, e // num_groups)
        sums = grouped.topk(2, dim=-1, sorted=False).values.sum(-1)
        keep = torch.sort(sums, dim=-1, descending=True, stable=True).indices[:, :num_topk_groups]
        drop = torch.ones(t, num_groups, dtype=torch.bool, device=s.device).scatter_(1, keep, False)
        biased = biased.masked_fill(drop.repeat_interleave(e // num_groups, dim=1), -torch.inf)
    idx = torch.sort(biased, dim=-1, descending=True, stable=True).indices[:, :k]
    w = s.gather(1, idx)
    w = w / w.sum(dim=-1, keepdim=True).clamp(min=1e-20) * routed_scaling_factor
    shared = torch.arange(e, e + num_shared_experts, device=s.device).expand(t, -1)
    idx = torch.cat([idx, shared], dim=1)
    w = torch.cat([w, torch.ones(t, num_shared_experts, device=s.device)], dim=1)
    per_rank = e // num_ep_ranks
    per_dp = per_rank * num_tp_ranks
    here = idx - tp_rank * per_rank
    mapped = here - torch.div(here, per_dp, rounding_mode="floor") * (per_dp - per_rank)
    on_rank = torch.div(idx, per_rank, rounding_mode="floor") % num_tp_ranks == tp_rank
    idx = torch.where(on_rank & (mapped >= 0), mapped, -1)
    return idx.to(torch.int32), w.float()


SPEC = KernelSpec(
    op="top2_sum_gate",
    factory=factory,
    keys=tuple({"dtype": d, "scoring": s} for d in DTYPES for s in SCORINGS),
    specs=({}, *({"E": e} for e in STATIC_E)),
    reference=reference,
    lowering_classes=ALL_CUDA_SAME,
    lowering_reason="no block-wide reduction, PDL or arch choice: one source on every arch",
    spec_error=spec_error,
    doc="idx, weights = DeepSeek-V3's router on logits[T, E]: sigmoid + bias selection, "
    "group-limited top-k (top-2 sums), renormalised and scaled weights, shared experts, EP/TP.",
)
