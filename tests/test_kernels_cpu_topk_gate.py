"""CPU tests of kernels_py.moe.topk_gate: the torch reference against an independent float64
computation, a lane-by-lane Python model of the kernel's algorithm against the reference
(layouts, per-lane caches and refills, the tie rule, -inf/NaN), the KernelSpec table, and
lowering smoke tests (tilelang, no GPU)."""

import math

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.moe import topk_gate as tg  # noqa: E402

INF = float("inf")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _float64_topk(row: list[float], k: int, scoring: str, renormalize: bool):
    """Independent: sort (-score, index) in Python, weights in float64 math."""
    s = [-INF if math.isnan(x) else x for x in row]
    order = sorted(range(len(s)), key=lambda i: (-s[i], i))[:k]
    if scoring == "softmax":
        top = max(s)
        e = [math.exp(x - top) if top > -INF else math.nan for x in s]
        w = [e[i] / sum(e) for i in order]
    else:
        w = [1.0 / (1.0 + math.exp(-s[i])) if s[i] > -INF else 0.0 for i in order]
    if renormalize:
        total = sum(w)
        w = [x / total if total else math.nan for x in w]  # 0 / 0: NaN, as torch
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


def test_reference_nan_counts_as_minus_inf():
    x = torch.tensor([[math.nan, -INF, 1.0, math.nan]])
    idx, w = tg.reference(x, 4, "sigmoid", False)
    assert idx.tolist() == [[2, 0, 1, 3]]
    assert w[0, 1:].tolist() == [0.0, 0.0, 0.0]


# --- a Python model of the kernel, lane by lane --------------------------------------------


def _fmax(a: float, b: float) -> float:
    """CUDA fmaxf: a NaN operand loses."""
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return max(a, b)


class _Lane:
    """One lane: its slots (NaN once moved into the cache) and its cache, best first."""

    def __init__(self, values: list[float], experts: list[int]):
        self.v, self.experts = values, experts
        self.cache: list[tuple[float, int]] = []
        self.dry = False

    def fill(self, k: int) -> None:
        for _ in range(min(tg.CACHE, k)):
            best = math.nan
            for x in self.v:
                best = _fmax(best, x)
            slot = next((j for j, x in enumerate(self.v) if x == best), None)
            if slot is None:  # v is spent
                break
            self.cache.append((best, self.experts[slot]))
            self.v[slot] = math.nan
        self.dry = len(self.cache) < tg.CACHE

    @property
    def head(self) -> tuple[float, int]:
        return self.cache[0] if self.cache else (math.nan, tg.NO_INDEX)


def _model(row: list[float], k: int, e: int | None) -> tuple[list[int], list[float], int]:
    """Picks (experts, scores) of one token as the kernel makes them, and its refill count."""
    lanes, slots, width = tg._layout(e)
    size = len(row)
    group = []
    for lane in range(lanes):
        experts = [(j // width) * width * lanes + lane * width + j % width for j in range(slots)]
        vals = [_fmax(row[x], -INF) if x < size else -INF for x in experts]
        group.append(_Lane(vals, experts))
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
        picks.append(win)
        scores.append(g)
        for ln in group:
            if ln.head[1] == win:
                ln.cache.pop(0)
    return picks, scores, refills


def _adversarial(e: int, lanes: int, width: int) -> torch.Tensor:
    """Lane 0's experts hold the largest scores: its cache runs out and refills."""
    x = torch.randn(1, e)
    lane0 = [x_ for x_ in range(e) if (x_ // width) % lanes == 0]
    x[0, lane0] = 10.0 + torch.arange(len(lane0), dtype=torch.float32)
    return x, len(lane0)


@pytest.mark.parametrize(
    "e,size",
    [
        (64, 64),
        (128, 128),
        (256, 256),
        (None, 8),
        (None, 60),
        (None, 100),
        (None, 384),
        (None, 512),
    ],
)
@pytest.mark.parametrize("kind", ["randn", "tied", "special", "adversarial"])
def test_kernel_model_matches_reference(e, size, kind):
    lanes, _, width = tg._layout(e)
    for k in sorted({1, 2, 6, 8, min(16, size)}):
        own = 0
        if kind == "adversarial":
            x, own = _adversarial(size, lanes, width)
        else:
            x = _inputs(5, size, kind)
        idx, _ = tg.reference(x, k)
        clean = torch.where(torch.isnan(x), torch.full_like(x, -INF), x)
        for t in range(x.shape[0]):
            picks, scores, refills = _model(x[t].tolist(), k, e)
            assert picks == idx[t].tolist(), (e, size, kind, k, t)
            assert scores == clean[t, idx[t].long()].tolist()
            if min(k, own) > tg.CACHE:
                assert refills > 0  # the refill path is what this case is for


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
    with pytest.raises(ValueError, match="multiple of 32"):
        tg.factory(arch="sm_90a", dtype="float32", scoring="softmax", E=100)


def test_layouts_cover_the_rows():
    for e in (*tg.STATIC_E, None):
        lanes, slots, width = tg._layout(e)
        size = tg.MAX_E if e is None else e
        experts = sorted(
            (j // width) * width * lanes + lane * width + j % width
            for lane in range(lanes)
            for j in range(slots)
        )
        assert experts == list(range(size))
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
