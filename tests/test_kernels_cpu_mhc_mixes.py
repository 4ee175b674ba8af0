"""CPU tests of the mHC mix kernels (kernels_py/mhc/mhc_pre_split_mixes.py,
mhc_head_compute_mix.py): the references against float64 and against TileKernels' references
(`tile-kernels` 1.0.0, ``tile_kernels.torch.mhc``: the same torch operations, so bit-exact),
and the kernels' lowering for every default arch (TileLang on the CPU, no GPU)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from _lowering import default_arch_sources, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402

from kernels_py.mhc import mhc_head_compute_mix as head  # noqa: E402
from kernels_py.mhc import mhc_pre_split_mixes as split  # noqa: E402

TOKENS = (0, 1, 7, 129, 4001)
SPECIAL = (0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30, 88.0, -104.0, math.inf, -math.inf, math.nan)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _mixes(t: int, k: int) -> torch.Tensor:
    """randn rows, then the special values spread over the first rows (where they fit)."""
    x = torch.randn(t, k) * 3
    flat = x.view(-1)
    n = min(len(SPECIAL), flat.numel())
    flat[:n] = torch.tensor(SPECIAL[:n])
    return x


def _sigmoid64(z: torch.Tensor) -> torch.Tensor:
    return 1 / (1 + torch.exp(-z))


def _close64(got: torch.Tensor, want: torch.Tensor, *, slack: torch.Tensor | float = 0.0):
    """float32 rounding of a few steps: 4 ulps of the value plus `slack` (NaN where want is)."""
    err = (got.double() - want).abs()
    ok = (err <= 2**-21 * want.abs() + slack + 1e-45) | (got.double() == want)
    assert bool((ok | (got.isnan() & want.isnan())).all()), float(err[~ok].max())


@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("r", [1, 4, 8])
def test_split_reference_in_float64_and_against_tile_kernels(t, r):
    k = r * (r + 2)
    x, scale, base = _mixes(t, k), torch.randn(3), torch.randn(k)
    c, eps = 2.0, 1e-2
    pre, post, comb = split.reference(x, scale, base, r, c, eps)
    assert pre.shape == post.shape == (t, r, 1) and comb.shape == (t, r, r)
    assert pre.dtype == post.dtype == comb.dtype == torch.float32
    s64 = split.scales(scale, r).double()
    prod = x.double() * s64
    z = prod + base.double()
    # the input's two roundings move z by up to 2**-24 (|x s| + |z|); sigmoid' <= 1/4
    dz = 2**-24 * (prod.abs() + z.abs())
    _close64(pre[..., 0], _sigmoid64(z[:, :r]) + eps, slack=dz[:, :r] / 4 + 2**-24 * eps)
    _close64(post[..., 0], _sigmoid64(z[:, r : 2 * r]) * c, slack=dz[:, r : 2 * r] * c / 4)
    _close64(comb.reshape(t, r * r), z[:, 2 * r :], slack=dz[:, 2 * r :])

    want = tk("mhc").mhc_pre_split_mixes_ref(x.unsqueeze(0), scale, base, r, c, eps)
    for got, w in zip((pre, post, comb), want, strict=True):
        assert torch.equal(got.unsqueeze(0).view(torch.int32), w.view(torch.int32))


@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("r", [1, 4, 5])
def test_head_reference_in_float64_and_against_tile_kernels(t, r):
    x, scale, base, eps = _mixes(t, r), torch.randn(1), torch.randn(r), 1e-6
    got = head.reference(x, scale, base, eps)
    assert got.shape == (t, r) and got.dtype == torch.float32
    prod = x.double() * scale.double()
    z = prod + base.double()
    _close64(got, _sigmoid64(z) + eps, slack=2**-24 * (prod.abs() + z.abs()) / 4 + 2**-24 * eps)
    want = tk("mhc").mhc_head_compute_mix_ref(x.unsqueeze(0), scale, base, eps)
    assert torch.equal(got.unsqueeze(0).view(torch.int32), want.view(torch.int32))


def test_split_reference_keeps_any_leading_dims():
    x, scale, base = torch.randn(2, 3, 5, 24), torch.randn(3), torch.randn(24)
    got = split.reference(x, scale, base, 4, 2.0, 0.0)
    flat = split.reference(x.reshape(-1, 24), scale, base, 4, 2.0, 0.0)
    for g, f in zip(got, flat, strict=True):
        assert g.shape[:3] == (2, 3, 5) and torch.equal(g.reshape(f.shape), f)


@needs_tilelang
@pytest.mark.parametrize("module", [split, head], ids=["split", "head"])
def test_lowering_rounds_as_torch_on_every_default_arch(module):
    """The product and sum round separately (no FMA contraction, as torch's two kernels), the
    division is correctly rounded, exp is expf; no shared memory or barrier."""
    for arch, src in default_arch_sources(module.factory, module.SPEC.op, dtype="float32"):
        assert "__fadd_rn(__fmul_rn(" in src and "__fdiv_rn(" in src and "expf(" in src, arch
        assert "__expf" not in src and "__shared__" not in src and "__syncthreads" not in src


@pytest.mark.parametrize("module", [split, head], ids=["split", "head"])
def test_only_float32_is_built(module):
    with pytest.raises(ValueError, match="unsupported dtype"):
        module.factory(arch="sm_90a", dtype="bfloat16")


def _autograd(fn, tensors, grads, *scalars):
    leaves = [t.clone().requires_grad_(True) for t in tensors]
    outs = fn(*leaves, *scalars)
    outs = outs if isinstance(outs, tuple) else (outs,)
    torch.autograd.backward(outs, grads)
    return [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("r", [1, 4, 8])
def test_split_backward_reference_against_autograd(t, r):
    """input_mixes_grad: the same float32 products as autograd through TileKernels' reference
    (torch's CPU kernels may round ``1 - s`` and the products in another order: a few ulps,
    more where ``1 - s`` cancels); the token sums against float64 autograd within float32
    summation error."""
    from kernels_py.mhc import mhc_pre_split_mixes_backward as split_bwd

    k = r * (r + 2)
    x, scale, base = torch.randn(t, k) * 3, torch.randn(3), torch.randn(k)
    grads = [torch.randn(t, r, n) for n in (1, 1, r)]
    got = split_bwd.reference(*grads, x, scale, base, 2.0)
    assert [g.shape for g in got] == [(t, k), (3,), (k,)]
    ref = tk("mhc").mhc_pre_split_mixes_ref
    want = _autograd(
        ref, (x.unsqueeze(0), scale, base), [g.unsqueeze(0) for g in grads], r, 2.0, 0.0
    )
    torch.testing.assert_close(got[0], want[0][0], rtol=1e-4, atol=1e-6)
    f64 = _autograd(
        lambda *a: split.reference(*a),
        (x.double(), scale.double(), base.double()),
        [g.double() for g in grads],
        r,
        2.0,
        0.0,
    )
    for g, w in zip(got[1:], f64[1:], strict=True):
        torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4 * math.sqrt(t + 1))


@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("r", [1, 4, 5])
def test_head_backward_reference_against_autograd(t, r):
    from kernels_py.mhc import mhc_head_compute_mix_backward as head_bwd

    x, scale, base, g = torch.randn(t, r) * 3, torch.randn(1), torch.randn(r), torch.randn(t, r)
    got = head_bwd.reference(g, x, scale, base)
    assert [a.shape for a in got] == [(t, r), (1,), (r,)]
    ref = tk("mhc").mhc_head_compute_mix_ref
    want = _autograd(ref, (x.unsqueeze(0), scale, base), [g.unsqueeze(0)], 1e-6)
    torch.testing.assert_close(got[0], want[0][0], rtol=1e-4, atol=1e-6)
    f64 = _autograd(head.reference, (x.double(), scale.double(), base.double()), [g.double()], 0.0)
    for a, w in zip(got[1:], f64[1:], strict=True):
        torch.testing.assert_close(a.double(), w, rtol=1e-4, atol=1e-4 * math.sqrt(t + 1))
