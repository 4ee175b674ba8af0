"""GPU tests of mhc_pre_split_mixes and mhc_head_compute_mix.

Outputs poisoned with NaN before each call. Both kernels round each step as torch does (no
FMA; ``1 / (1 + expf(-z))`` with a correctly rounded division), so they are compared
bit-exact with their references evaluated by torch on the same GPU, and against float64
within float32 rounding. Token counts 0, 1, 7, 129, 4001 and a large one, R in {1, 2, 3, 4,
8}, inputs with -0.0, huge and tiny values, +-inf and NaN. The last tests compare with
TileKernels' references (``tile_kernels.torch.mhc``) bit-exact, and check that every variant
built for this GPU was exercised.
"""

from __future__ import annotations

import math

import pytest
from _gpu_helpers import assert_every_variant_exercised, selected

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

F32 = torch.float32
SEEN: set[str] = set()
CASES = [(t, r) for t in (1, 7, 129, 4001, 65537) for r in (1, 2, 3, 4, 8)]
SPECIAL = (0.0, -0.0, 1e-30, 1e30, -1e30, 88.0, -104.0, math.inf, -math.inf, math.nan)


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32)


def _mixes(t: int, k: int) -> torch.Tensor:
    x = torch.randn(t, k, device="cuda") * 3
    n = min(len(SPECIAL), x.numel())
    x.view(-1)[:n] = torch.tensor(SPECIAL[:n], device="cuda")
    return x


def _within_float32(got: torch.Tensor, want64: torch.Tensor, slack: torch.Tensor) -> None:
    err = (got.double() - want64).abs()
    ok = (err <= 2**-21 * want64.abs() + slack) | (got.double() == want64)
    ok |= got.isnan() & want64.isnan()
    assert bool(ok.all()), f"{int((~ok).sum())} off, max error {err[~ok].max()}"


@pytest.mark.parametrize(("t", "r"), CASES)
def test_split_forward(t, r):
    import tileaot

    from kernels_py.mhc.mhc_pre_split_mixes import reference, scales

    k = r * (r + 2)
    x, scale, base = _mixes(t, k), torch.randn(3, device="cuda"), torch.randn(k, device="cuda")
    out = tuple(
        torch.full(s, math.nan, dtype=F32, device="cuda") for s in ((t, r, 1), (t, r, 1), (t, r, r))
    )
    name = selected("mhc_pre_split_mixes", "fp32", [(t, k), (3,), (k,), *(o.shape for o in out)])
    SEEN.add(name)
    got = tileaot.mhc_pre_split_mixes(x, scale, base, r, 2.0, 1e-2, out=out)
    torch.cuda.synchronize()
    assert all(g is o for g, o in zip(got, out, strict=True))
    for g, w in zip(got, reference(x, scale, base, r, 2.0, 1e-2), strict=True):
        assert torch.equal(_bits(g), _bits(w)), name
    prod = x.double() * scales(scale, r).double()
    z = prod + base.double()
    dz = 2**-24 * (prod.abs() + z.abs()) + 1e-45
    sig = 1 / (1 + torch.exp(-z))
    _within_float32(got[0][..., 0], sig[:, :r] + 1e-2, dz[:, :r] / 4 + 2**-24 * 1e-2)
    _within_float32(got[1][..., 0], sig[:, r : 2 * r] * 2.0, dz[:, r : 2 * r] / 2)
    _within_float32(got[2].reshape(t, r * r), z[:, 2 * r :], dz[:, 2 * r :])


@pytest.mark.parametrize(("t", "r"), CASES)
def test_head_forward(t, r):
    import tileaot

    from kernels_py.mhc.mhc_head_compute_mix import reference

    x, scale, base = _mixes(t, r), torch.randn(1, device="cuda"), torch.randn(r, device="cuda")
    out = torch.full((t, r), math.nan, dtype=F32, device="cuda")
    name = selected("mhc_head_compute_mix", "fp32", [(t, r), (1,), (r,), (t, r)])
    SEEN.add(name)
    assert tileaot.mhc_head_compute_mix(x, scale, base, 1e-6, out=out) is out
    torch.cuda.synchronize()
    assert torch.equal(_bits(out), _bits(reference(x, scale, base, 1e-6))), name
    prod = x.double() * scale.double()
    z = prod + base.double()
    slack = 2**-24 * (prod.abs() + z.abs()) / 4 + 2**-24 * 1e-6 + 1e-45
    _within_float32(out, 1 / (1 + torch.exp(-z)) + 1e-6, slack)


def test_no_tokens_launch_nothing_and_keep_leading_dims():
    import tileaot

    x = torch.randn(2, 0, 24, device="cuda")
    pre, post, comb = tileaot.mhc_pre_split_mixes(
        x, torch.ones(3, device="cuda"), torch.zeros(24, device="cuda"), 4, 2.0, 0.0
    )
    assert pre.shape == post.shape == (2, 0, 4, 1) and comb.shape == (2, 0, 4, 4)
    y = tileaot.mhc_head_compute_mix(
        x[..., :4].contiguous(), torch.ones(1, device="cuda"), torch.zeros(4, device="cuda"), 0.0
    )
    assert y.shape == (2, 0, 4)


@pytest.mark.parametrize("r", [4, 8])
def test_match_tile_kernels_references(r):
    import tileaot
    from _tile_kernels import tk

    ref = tk("mhc")
    k = r * (r + 2)
    x = torch.randn(2, 1023, k, device="cuda")
    scale, base = torch.randn(3, device="cuda") * 0.1, torch.randn(k, device="cuda") * 0.1
    got = tileaot.mhc_pre_split_mixes(x, scale, base, r, 2.0, 1e-6)
    want = ref.mhc_pre_split_mixes_ref(x, scale, base, r, 2.0, 1e-6)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(_bits(g), _bits(w))
    m = x[..., :r].contiguous()
    got = tileaot.mhc_head_compute_mix(m, scale[:1], base[:r], 1e-6)
    assert torch.equal(
        _bits(got), _bits(ref.mhc_head_compute_mix_ref(m, scale[:1], base[:r], 1e-6))
    )


def _sums_close(got: torch.Tensor, terms: torch.Tensor) -> None:
    """A float32 sum of `terms` (float64, the summed dim first) in another order: within
    ``4e-5 * sum |terms|`` (a few hundred float32 additions deep at 65537 tokens)."""
    err = (got.double() - terms.sum(0)).abs()
    ok = err <= 4e-5 * terms.abs().sum(0) + 1e-30
    assert bool(ok.all()), f"max error {err.max()}"


@pytest.mark.parametrize(("t", "r"), CASES)
def test_split_backward(t, r):
    import tileaot

    from kernels_py.mhc.mhc_pre_split_mixes import scales
    from kernels_py.mhc.mhc_pre_split_mixes_backward import reference

    k = r * (r + 2)
    x = torch.randn(t, k, device="cuda") * 3
    scale, base = torch.randn(3, device="cuda"), torch.randn(k, device="cuda")
    grads = [torch.randn(t, r, n, device="cuda") for n in (1, 1, r)]
    out = tuple(torch.full(s, math.nan, dtype=F32, device="cuda") for s in ((t, k), (3,), (k,)))
    shapes = [*(g.shape for g in grads), (t, k), (3,), (k,), *(o.shape for o in out)]
    name = selected("mhc_pre_split_mixes_backward", "fp32", [*shapes, (-(-t // 256), 2 * k)])
    SEEN.add(name)
    got = tileaot.mhc_pre_split_mixes_backward(*grads, x, scale, base, 2.0, out=out)
    torch.cuda.synchronize()
    assert all(g is o for g, o in zip(got, out, strict=True))
    want = reference(*grads, x, scale, base, 2.0)
    assert torch.equal(_bits(got[0]), _bits(want[0])), name
    gz = (want[0] / scales(scale, r)).double()  # exact: a product by the scale, undone
    _sums_close(got[2], gz)
    by_col = gz * x.double()
    segs = (by_col[:, :r], by_col[:, r : 2 * r], by_col[:, 2 * r :])
    for i, seg in enumerate(segs):
        _sums_close(got[1][i : i + 1], seg.reshape(-1, 1))
    again = tileaot.mhc_pre_split_mixes_backward(*grads, x, scale, base, 2.0)
    assert all(torch.equal(_bits(a), _bits(g)) for a, g in zip(again, got, strict=True))


@pytest.mark.parametrize(("t", "r"), CASES)
def test_head_backward(t, r):
    import tileaot

    from kernels_py.mhc.mhc_head_compute_mix_backward import reference

    x, g = torch.randn(t, r, device="cuda") * 3, torch.randn(t, r, device="cuda")
    scale, base = torch.randn(1, device="cuda"), torch.randn(r, device="cuda")
    out = tuple(torch.full(s, math.nan, dtype=F32, device="cuda") for s in ((t, r), (1,), (r,)))
    shapes = [(t, r), (t, r), (1,), (r,), *(o.shape for o in out), (-(-t // 256), 2 * r)]
    name = selected("mhc_head_compute_mix_backward", "fp32", shapes)
    SEEN.add(name)
    got = tileaot.mhc_head_compute_mix_backward(g, x, scale, base, out=out)
    torch.cuda.synchronize()
    want = reference(g, x, scale, base)
    assert torch.equal(_bits(got[0]), _bits(want[0])), name
    gz = (want[0] / scale).double()
    _sums_close(got[2], gz)
    _sums_close(got[1], (gz * x.double()).reshape(-1, 1))


@pytest.mark.parametrize("r", [4, 8])
def test_autograd_matches_tile_kernels_references(r):
    import tileaot
    from _tile_kernels import tk

    ref = tk("mhc")
    k = r * (r + 2)
    x = torch.randn(2, 1023, k, device="cuda")
    scale, base = torch.randn(3, device="cuda") * 0.1, torch.randn(k, device="cuda") * 0.1
    grads = [torch.randn(2, 1023, r, n, device="cuda") for n in (1, 1, r)]
    results = []
    for fn in (tileaot.mhc_pre_split_mixes, ref.mhc_pre_split_mixes_ref):
        leaves = [t.clone().requires_grad_(True) for t in (x, scale, base)]
        torch.autograd.backward(fn(*leaves, r, 2.0, 1e-6), grads)
        results.append([leaf.grad for leaf in leaves])
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    m, g = x[..., :r].contiguous(), grads[0][..., 0].contiguous()
    results = []
    for fn in (tileaot.mhc_head_compute_mix, ref.mhc_head_compute_mix_ref):
        leaves = [t.clone().requires_grad_(True) for t in (m, scale[:1], base[:r])]
        fn(*leaves, 1e-6).backward(g)
        results.append([leaf.grad for leaf in leaves])
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


OPS = ["mhc_pre_split_mixes", "mhc_head_compute_mix"]
OPS += [f"{op}_backward" for op in OPS]


@pytest.mark.parametrize("op", OPS)
def test_every_variant_for_this_gpu_was_exercised(op):
    assert_every_variant_exercised((op,), SEEN)
