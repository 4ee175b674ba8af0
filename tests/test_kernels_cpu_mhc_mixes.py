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
