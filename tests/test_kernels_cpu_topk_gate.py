"""CPU tests of kernels_py.moe.topk_gate: the torch reference against an independent float64
computation, a lane-by-lane Python model of the kernel's algorithm against the reference
(layouts, per-lane caches and refills, the tie rule, -inf/NaN), the KernelSpec table, and
lowering smoke tests (tilelang, no GPU)."""

import itertools
import math
import struct

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.moe import topk_gate as tg  # noqa: E402

INF = float("inf")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _float64_topk(row: list[float], k: int, scoring: str, renormalize: bool):
    """Independent: sort (-rank, index) in Python (NaN first), weights in float64 math."""

    def sig(x: float) -> float:
        return math.nan if math.isnan(x) else _f32(1.0 / (1.0 + math.exp(min(-x, 700.0))))

    rank = row if scoring == "softmax" else [sig(x) for x in row]
    order = sorted(range(len(row)), key=lambda i: (not math.isnan(rank[i]), -rank[i], i))[:k]
    if scoring == "softmax":
        if any(math.isnan(x) or x == INF for x in row):
            w = [math.nan] * len(order)  # as torch.softmax
        else:
            top = max(row)
            e = [math.exp(x - top) if top > -INF else math.nan for x in row]
            w = [e[i] / sum(e) for i in order]
    else:
        w = [rank[i] for i in order]
    if renormalize:
        total = sum(w)
        w = [x / max(total, 1e-20) if not math.isnan(total) else math.nan for x in w]
    return order, w


def _inputs(t: int, e: int, kind: str) -> torch.Tensor:
    if kind == "randn":
        return torch.randn(t, e) * 3
    if kind == "tied":  # few distinct values: ties everywhere, broken by index
        return torch.randint(-2, 3, (t, e)).float() * 0.5
    if kind == "special":  # -inf, NaN, +-0 and an all -inf row
        x = torch.randint(-1, 2, (t, e)).float()
        x[x == -1] = -INF
        x[:, ::7] = math.nan
        x[:, 1::5] = -0.0
        x[0] = -INF
        return x
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["randn", "tied", "special"])
@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
@pytest.mark.parametrize("renormalize", [True, False])
def test_reference_matches_float64(kind, scoring, renormalize):
    x = _inputs(6, 40, kind)
    idx, w = tg.reference(x, 7, scoring, renormalize)
    assert idx.dtype == torch.int32 and w.dtype == torch.float32
    assert idx.shape == w.shape == (6, 7)
    for t in range(6):
        order, want = _float64_topk(x[t].tolist(), 7, scoring, renormalize)
        assert idx[t].tolist() == order
        torch.testing.assert_close(
            w[t].double(),
            torch.tensor(want, dtype=torch.float64),
            rtol=1e-6,
            atol=0,
            equal_nan=True,
        )


def test_reference_ties_go_to_the_smaller_index():
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0, -0.0, 0.0, 0.0]])
    idx, w = tg.reference(x, 7, "softmax", True)
    assert idx.tolist() == [[1, 2, 4, 3, 0, 5, 6]]  # -0.0 and 0.0 tie too
    assert torch.equal(w[0, :3], w[0, :1].expand(3))
    torch.testing.assert_close(w.sum(), torch.tensor(1.0))


def test_reference_nan_ranks_first_as_tilekernels():
    x = torch.tensor([[math.nan, -INF, 1.0, math.nan, INF]])
    idx, w = tg.reference(x, 5, "sigmoid", False)
    assert idx.tolist() == [[0, 3, 4, 2, 1]]  # torch.sort: NaN above +inf
    assert math.isnan(w[0, 0]) and math.isnan(w[0, 1]) and w[0, 2:].tolist()[::2] == [1.0, 0.0]
    idx, _ = tg.reference(x, 5, "softmax", True)
    assert idx.tolist() == [[0, 3, 4, 2, 1]]


def test_reference_sigmoid_ranks_the_saturated_float32_sigmoid():
    x = torch.tensor([[17.0, 30.0, 20.0, 5.0, 100.0]])  # sigmoid: 1.0 from 17 up
    idx, w = tg.reference(x, 4, "sigmoid", False)
    assert idx.tolist() == [[0, 1, 2, 4]]  # equal float32 values: the smaller index
    assert w.tolist() == [[1.0, 1.0, 1.0, 1.0]]
    idx, _ = tg.reference(x, 4, "softmax", False)
    assert idx.tolist() == [[4, 1, 2, 0]]  # softmax ranks the logits


def test_reference_renormalize_clamps_a_zero_sum():
    x = torch.full((1, 4), -INF)
    _, w = tg.reference(x, 2, "sigmoid", True)
    assert w.tolist() == [[0.0, 0.0]]  # 0 / 1e-20, not 0 / 0


# --- a Python model of the kernel, lane by lane --------------------------------------------


def _fmax(a: float, b: float) -> float:
    """CUDA fmaxf: a NaN operand loses."""
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return max(a, b)


def _rank(x: torch.Tensor, scoring: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's rank values of scores x and which were NaN: softmax ranks the score (NaN
    held as +inf, flagged), sigmoid ranks torch.sigmoid (NaN held as 2, above every value)."""
    nan = torch.isnan(x)
    if scoring == "softmax":
        return torch.where(nan, torch.full_like(x, INF), x), nan
    return torch.where(nan, torch.full_like(x, 2.0), torch.sigmoid(x)), torch.zeros_like(nan)


class _Lane:
    """One lane: its slots (NaN once moved into the cache) and its cache, best first; a NaN
    score's cached index is lowered by NAN_TIE (it wins ties at +inf)."""

    def __init__(self, values: list[float], nans: list[bool], experts: list[int]):
        self.v, self.nans, self.experts = values, nans, experts
        self.cache: list[tuple[float, int]] = []
        self.dry = False

    def fill(self, k: int) -> None:
        for _ in range(min(tg.CACHE, k)):
            best = math.nan
            for x in self.v:
                best = _fmax(best, x)
            equal = [j for j, x in enumerate(self.v) if x == best]
            if not equal:  # v is spent
                break
            slot = next((j for j in equal if self.nans[j]), equal[0])
            self.cache.append((best, self.experts[slot] - tg.NAN_TIE * self.nans[slot]))
            self.v[slot] = math.nan
        self.dry = len(self.cache) < tg.CACHE

    @property
    def head(self) -> tuple[float, int]:
        return self.cache[0] if self.cache else (math.nan, tg.NO_INDEX)


def _model(
    row: list[float], nans: list[bool], k: int, e: int | None
) -> tuple[list[int], list[float], int]:
    """Picks (experts, rank values) of one token (rank values and NaN flags: _rank) as the
    kernel makes them, and its refill count."""
    lanes, slots, width = tg._layout(e)
    size = len(row)
    group = []
    for lane in range(lanes):
        experts = [(j // width) * width * lanes + lane * width + j % width for j in range(slots)]
        vals = [row[x] if x < size else -INF for x in experts]
        group.append(_Lane(vals, [x < size and nans[x] for x in experts], experts))
    for ln in group:
        ln.fill(k)
    picks, scores, refills = [], [], 0
    for _ in range(min(k, tg.MAX_K)):
        if any(not ln.cache and not ln.dry for ln in group):
            refills += 1
            for ln in group:
                if not ln.cache and not ln.dry:
                    ln.fill(k)
        g = math.nan
        for ln in group:
            g = _fmax(g, ln.head[0])
        win = min(ln.head[1] if ln.head[0] == g else tg.NO_INDEX for ln in group)
        picks.append(win & (tg.NAN_TIE - 1))
        scores.append(g)
        for ln in group:
            if ln.head[1] == win:
                ln.cache.pop(0)
    return picks, scores, refills


def _adversarial(e: int, lanes: int, width: int) -> tuple[torch.Tensor, int]:
    """Lane 0's experts hold the largest scores: its cache runs out and refills."""
    x = torch.randn(1, e)
    lane0 = [x_ for x_ in range(e) if (x_ // width) % lanes == 0]
    x[0, lane0] = 10.0 + torch.arange(len(lane0), dtype=torch.float32)
    return x, len(lane0)


def _case(kind: str, e: int | None, size: int) -> tuple[torch.Tensor, int]:
    """Five tokens of `size` scores of one kind, and how many of a token's picks the
    adversarial kind puts in one lane (0 for the others)."""
    if kind == "adversarial":
        lanes, _, width = tg._layout(e)
        return _adversarial(size, lanes, width)
    if kind == "bf16":
        return torch.randn(5, size).bfloat16().float(), 0
    if kind.startswith("near"):
        return _near(5, size, -1.0 if kind == "near_negative" else 1.0), 0
    if kind == "huge":  # sigmoid saturates: many equal float32 values, ties by index
        x = torch.randn(5, size) * 40
        x[1, ::3] = INF
        x[1, 1::4] = math.nan
        return x, 0
    return _inputs(5, size, kind), 0


@pytest.mark.parametrize(
    "e,size",
    [
        (64, 64),
        (128, 128),
        (256, 256),
        (8, 8),
        (60, 60),
        (160, 160),
        (7, 7),
        (384, 384),
        (None, 8),
        (None, 60),
        (None, 100),
        (None, 384),
        (None, 512),
    ],
)
@pytest.mark.parametrize("kind", ["randn", "tied", "special", "adversarial", "huge"])
@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
def test_kernel_model_matches_reference(e, size, kind, scoring):
    for k in sorted({k for k in (1, 2, 6, 8) if k <= size} | {min(32, size)}):
        x, own = _case(kind, e, size)
        idx, _ = tg.reference(x, k, scoring)
        rank, nans = _rank(x, scoring)
        for t in range(x.shape[0]):
            picks, scores, refills = _model(rank[t].tolist(), nans[t].tolist(), k, e)
            assert picks == idx[t].tolist(), (e, size, kind, k, t)
            assert scores == rank[t, idx[t].long()].tolist()
            if min(k, own) > tg.CACHE:
                assert refills > 0  # the refill path is what this case is for


# --- the keyed selection (KEYED), modelled lane by lane -------------------------------------


def _exchange(net: list[int], i: int, j: int) -> None:
    net[i], net[j] = max(net[i], net[j]), min(net[i], net[j])


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_sort_pairs_sort_every_zero_one_input(n):
    pairs = list(tg._sort_pairs(0, n))
    for bits in range(1 << n):  # the 0-1 principle: sorting every 0/1 input sorts all inputs
        net = [bits >> i & 1 for i in range(n)]
        for i, j in pairs:
            _exchange(net, i, j)
        assert net == sorted(net, reverse=True), (n, bits)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_bitonic_pairs_merge_two_sorted_lists_into_the_best_n(n):
    for _ in range(200):
        a, b = (sorted(torch.randint(0, 50, (n,)).tolist(), reverse=True) for _ in range(2))
        net = [max(a[i], b[n - 1 - i]) for i in range(n)]
        for i, j in tg._bitonic_pairs(n):
            _exchange(net, i, j)
        assert net == sorted(a + b, reverse=True)[:n]


def _bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _key(x: float, expert: int, e: int | None, nan: bool = False) -> int:
    """The kernel's key of rank value x (a NaN score if `nan`) held for `expert` (see
    tg._keyed_macros)."""
    mask = (1 << tg._tie_bits(e)) - 1
    b = _bits(x + 0.0)  # + 0.0: -0 becomes +0
    u = tg.NAN_KEY if nan else b ^ (0xFFFFFFFF if b >> 31 else 0x80000000)
    return ((u | mask) - expert) & 0xFFFFFFFF


def _network(keys: list[int]) -> list[int]:
    """The kernel's fill network on a lane's keys: the best CACHE, best first, 0 past the end."""
    c = tg.CACHE
    net = [0] * (2 * c)
    for gi, members in enumerate(tg._groups(len(keys))):
        base = 0 if gi == 0 else c
        for i, j in enumerate(members):
            net[base + i] = 0 if j is None else keys[j]
        for i, j in tg._sort_pairs(0, c):
            _exchange(net, base + i, base + j)
        if gi:
            net[:c] = [max(net[i], net[2 * c - 1 - i]) for i in range(c)]
            for i, j in tg._bitonic_pairs(c):
                _exchange(net, i, j)
    return net[:c]


class _KeyedLane:
    """One lane of the keyed path: its keys, cache (best first, 0 = empty) and refill floor."""

    def __init__(self, keys: list[int]):
        self.keys = keys
        self.cache = _network(keys)
        self.floor, self.dry = self.cache[-1], self.cache[-1] == 0

    def refill(self) -> None:
        f = self.floor
        got = [(t + f) % 2**32 for t in _network([(x - f) % 2**32 for x in self.keys])]
        self.cache = [x if x < f else 0 for x in got]
        self.floor, self.dry = self.cache[-1], self.cache[-1] == 0


def _keyed_model(row: list[float], nans: list[bool], k: int, e: int | None):
    """(experts by the keys, whether two of the k + 1 best keys share a bucket, whether the
    row has bits the keys drop, refill count) for one token (rank values and NaN flags:
    _rank), as the keyed kernel runs it."""
    lanes, slots, width = tg._layout(e)
    bits = tg._tie_bits(e)
    group = []
    for lane in range(lanes):
        experts = [(j // width) * width * lanes + lane * width + j % width for j in range(slots)]
        keys = [_key(row[x], x, e, nans[x]) if x < len(row) else _key(-INF, x, e) for x in experts]
        group.append(_KeyedLane(keys))
    near, last, picks, refills = 2**32 - 1, 0, [], 0
    for r in range(min(k, tg.MAX_K) + 1):  # one more: the cut
        if any(not ln.cache[0] and not ln.dry for ln in group):
            refills += 1
            for ln in group:
                if not ln.cache[0] and not ln.dry:
                    ln.refill()
        best = max(ln.cache[0] for ln in group)
        near, last = min(near, best ^ last), best
        if r < k:
            picks.append(~best & ((1 << bits) - 1))
            for ln in group:
                if ln.cache[0] == best:
                    ln.cache = ln.cache[1:] + [0]
    lossy = any(_bits(x + 0.0) & ((1 << bits) - 1) for x in row)
    return picks, near < 1 << bits, lossy, refills


def _near(t: int, e: int, sign: float) -> torch.Tensor:
    """Top scores a few ulps apart (one bucket, different values) above ordinary ones."""
    base = sign * (3 + torch.rand(t, 1))
    steps = torch.randint(-300, 300, (t, e), dtype=torch.int32)
    x = (base.view(torch.int32) + steps).view(torch.float32)
    x[:, ::3] = torch.randn(t, len(range(0, e, 3))) * 0.1 - 5 * (sign < 0)
    return x


@pytest.mark.parametrize(
    "e,size", [(64, 64), (128, 128), (256, 256), (60, 60), (384, 384), (None, 60), (None, 512)]
)
@pytest.mark.parametrize(
    "kind", ["randn", "tied", "special", "adversarial", "bf16", "near", "near_negative", "huge"]
)
@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
def test_keyed_model_matches_reference_or_falls_back(e, size, kind, scoring):
    for k in sorted({k for k in (1, 2, 6, 8) if k <= size} | {min(32, size)}):
        x, own = _case(kind, e, size)
        idx, _ = tg.reference(x, k, scoring)
        rank, nans = _rank(x, scoring)
        fallbacks = 0
        for t in range(x.shape[0]):
            picks, shared, lossy, refills = _keyed_model(rank[t].tolist(), nans[t].tolist(), k, e)
            if shared and lossy:  # the kernel redoes this token on the float path
                fallbacks += 1
            else:
                assert picks == idx[t].tolist(), (e, size, kind, k, t)
            if kind in ("tied", "bf16", "special") and scoring == "softmax":
                assert not lossy  # these keys are exact: no fallback, however many ties
            if min(k, own) > tg.CACHE:
                assert refills > 0
        if kind.startswith("near") and k >= 6 and scoring == "softmax":
            assert fallbacks > 0  # the case is there to exercise the fallback


def test_keys_order_like_scores_then_experts():
    """Softmax rank values: NaN (held as +inf, flagged) above +inf, then the scores."""
    vals = [-INF, -3.5, -1.0, -0.0, 0.0, 1e-30, 1.0, 2.5, INF, math.nan]
    vals += torch.randn(40).tolist()
    for e in (64, 256, None):
        mask = (1 << tg._tie_bits(e)) - 1
        for x, y in itertools.product(vals, repeat=2):
            for ex, ey in ((3, 9), (9, 3)):
                nx, ny = math.isnan(x), math.isnan(y)
                kx = _key(INF if nx else x, ex, e, nx)
                ky = _key(INF if ny else y, ey, e, ny)
                a, b = (nx, INF if nx else x), (ny, INF if ny else y)
                assert ~kx & mask == ex
                if kx >> tg._tie_bits(e) != ky >> tg._tie_bits(e):  # different buckets
                    assert (kx > ky) == (a > b)
                elif a == b:  # equal scores (both zeros included): the smaller expert first
                    assert (kx > ky) == (ex < ey)


# --- specs ----------------------------------------------------------------------------------


def test_spec_variants():
    spec = tg.SPEC
    names = [spec.variant_name(key, sp) for key in spec.keys for sp in spec.specs]
    assert names == [
        f"topk_gate_fp32_{s}_{e}"
        for s in ("softmax", "sigmoid")
        for e in ("any", "e64", "e128", "e256")
    ]
    assert [spec.key_string(key) for key in spec.keys] == ["fp32,softmax", "fp32,sigmoid"]
    assert spec.supports("sm_70", spec.keys[0], {})
    assert spec.constraints(spec.keys[0], {}) == {}


def test_factory_rejects_bad_keys_and_sizes():
    with pytest.raises(ValueError, match="unsupported key"):
        tg.factory(arch="sm_90a", dtype="bfloat16", scoring="softmax")
    with pytest.raises(ValueError, match="unsupported key"):
        tg.factory(arch="sm_90a", dtype="float32", scoring="relu")
    for bad in (0, 513, 1024):
        with pytest.raises(ValueError, match=r"static E must be an expert count 1 <= E <= 512"):
            tg.factory(arch="sm_90a", dtype="float32", scoring="softmax", E=bad)


def test_spec_error_accepts_every_expert_count_up_to_512():
    key = tg.SPEC.keys[0]
    assert all(tg.SPEC.spec_error(key, {"E": e}) is None for e in range(1, 513))
    assert tg.SPEC.spec_error(key, {}) is None
    assert "got 600" in tg.SPEC.spec_error(key, {"E": 600})


STATIC_SIZES = (1, 7, 8, 60, 64, 100, 128, 160, 250, 256, 384, 500, 512)


def test_layouts_cover_the_rows():
    for e in (*STATIC_SIZES, None):
        lanes, slots, width = tg._layout(e)
        size = tg.MAX_E if e is None else e
        experts = sorted(
            (j // width) * width * lanes + lane * width + j % width
            for lane in range(lanes)
            for j in range(slots)
        )
        assert experts == list(range(lanes * slots)) and lanes * slots >= size
        assert slots <= 32 and slots % width == 0 and size % width == 0
        assert lanes * slots - 1 < 1 << tg._tie_bits(e)  # padding experts fit the keys too
        assert tg.MAX_K % lanes == 0 and tg.THREADS % lanes == 0


# --- lowering smoke tests (need tilelang, no GPU) -------------------------------------------


@needs_tilelang
def test_lower_static_e_uses_vector_loads_shuffles_and_votes():
    src = lower_source(
        tg.factory(arch="sm_90a", dtype="float32", scoring="softmax", E=256), "sm_90a", "t"
    )
    assert "float4" in src and "__shfl_xor_sync" in src and "__any_sync" in src
    assert "expf" in src and "__fdiv_rn" in src and "__expf" not in src
    # NaN tests must survive TVM's simplifier (it folds x != x to false for a raw compare).
    assert "(cv[0] != cv[0])" in src


@needs_tilelang
def test_lower_generic_sigmoid_masks_past_e():
    src = lower_source(tg.factory(arch="sm_80", dtype="float32", scoring="sigmoid"), "sm_80", "t")
    assert "< E)" in src and "-CUDART_INF_F" in src and "__any_sync" in src


@needs_tilelang
def test_lower_keyed_selection_keeps_the_float_path_as_fallback(monkeypatch):
    src = lower_source(
        tg.factory(arch="sm_90a", dtype="float32", scoring="softmax", E=256), "sm_90a", "t"
    )
    monkeypatch.setattr(tg, "KEYED", False)
    float_only = lower_source(
        tg.factory(arch="sm_90a", dtype="float32", scoring="softmax", E=256), "sm_90a", "t"
    )
    assert "uint key[" not in float_only and "(cv[0] != cv[0])" in float_only
    monkeypatch.setattr(tg, "KEYED", True)
    assert "uint key[32];" in src and "__fadd_rn" in src  # the keys, -0 made +0
    assert "__shfl_sync((uint)4294967295, pv[0], 0, 8)" in src  # the max: pick 0's score
    assert "(cv[0] != cv[0])" in src  # the float path, for tokens whose keys may misorder
    monkeypatch.setattr(tg, "CACHE", 3)
    with pytest.raises(ValueError, match="power-of-two CACHE"):
        tg.factory(arch="sm_90a", dtype="float32", scoring="softmax", E=256)
