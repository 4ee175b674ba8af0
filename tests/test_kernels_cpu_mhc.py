"""CPU tests of the mHC kernels beyond sinkhorn (kernels_py/mhc): their lowering for every
default arch (TileLang on the CPU, no GPU), and the references against a plain loop."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.mhc import expand_to_mhc as expand_fwd  # noqa: E402
from kernels_py.mhc import expand_to_mhc_backward as expand_bwd  # noqa: E402
from kernels_py.mhc import mhc_post as post_fwd  # noqa: E402
from kernels_py.mhc import mhc_post_backward as post_bwd  # noqa: E402
from kernels_py.mhc import mhc_pre_apply_mix as pre_mix_fwd  # noqa: E402
from kernels_py.mhc import mhc_pre_apply_mix_backward as pre_mix_bwd  # noqa: E402
from kernels_py.spec import DEFAULT_ARCHS  # noqa: E402


def test_expand_references_against_a_loop():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 24).to(torch.bfloat16)
    y = expand_fwd.reference(x, 3)
    for r in range(3):
        assert torch.equal(y[:, :, r], x)
    g = torch.randn(3, 4, 24).to(torch.bfloat16)
    acc = [[0.0] * 24 for _ in range(3)]
    for t in range(3):
        for r in range(4):
            for h in range(24):  # float32 sums in r order (float32 holds these exactly)
                acc[t][h] = float(torch.tensor(acc[t][h]) + g[t, r, h].float())
    assert torch.equal(expand_bwd.reference(g), torch.tensor(acc).to(torch.bfloat16))


def test_pre_apply_mix_references_in_float64():
    torch.manual_seed(0)
    x = torch.randn(3, 4, 40).to(torch.bfloat16)
    mix = torch.rand(3, 4, 1)
    want = (x.double() * mix.double()).sum(-2)
    torch.testing.assert_close(pre_mix_fwd.reference(x, mix).double(), want, rtol=8e-3, atol=0)
    g = torch.randn(3, 40).to(torch.bfloat16)
    grad_x, grad_mix = pre_mix_bwd.reference(g, x, mix)
    want_x = mix.double() * g.double().unsqueeze(-2)
    torch.testing.assert_close(grad_x.double(), want_x, rtol=8e-3, atol=0)  # bf16 rounding
    want_mix = (g.double().unsqueeze(-2) * x.double()).sum(-1, keepdim=True)
    torch.testing.assert_close(grad_mix.double(), want_mix, rtol=1e-5, atol=1e-5)


def test_post_references_in_float64():
    torch.manual_seed(0)
    x, res = torch.randn(3, 40).to(torch.bfloat16), torch.randn(3, 4, 40).to(torch.bfloat16)
    post, comb = torch.randn(3, 4, 1), torch.randn(3, 4, 4)
    x64, r64, p64, c64 = (t.double() for t in (x, res, post, comb))
    want = p64 * x64.unsqueeze(-2) + torch.einsum("tmn,tmh->tnh", c64, r64)
    torch.testing.assert_close(
        post_fwd.reference(x, res, post, comb).double(), want, rtol=8e-3, atol=1e-6
    )
    g = torch.randn(3, 4, 40).to(torch.bfloat16)
    g64 = g.double()
    gx, gres, gpost, gcomb = post_bwd.reference(g, x, res, post, comb)
    torch.testing.assert_close(gx.double(), (p64 * g64).sum(-2), rtol=8e-3, atol=1e-6)
    torch.testing.assert_close(
        gres.double(), torch.einsum("tmn,tnh->tmh", c64, g64), rtol=8e-3, atol=1e-6
    )
    f32 = {"rtol": 1e-5, "atol": 1e-5}  # float32 sums
    want_post = (x64.unsqueeze(-2) * g64).sum(-1, keepdim=True)
    torch.testing.assert_close(gpost.double(), want_post, **f32)
    torch.testing.assert_close(gcomb.double(), torch.einsum("tmh,tnh->tmn", r64, g64), **f32)


# (module, whether the kernel reduces across threads through shared memory)
KERNELS = [(expand_fwd, False), (expand_bwd, False), (pre_mix_fwd, False), (pre_mix_bwd, True)]
KERNELS += [(post_fwd, False), (post_bwd, True)]


@needs_tilelang
@pytest.mark.parametrize("arch", DEFAULT_ARCHS)
@pytest.mark.parametrize(("module", "shared"), KERNELS, ids=[m.SPEC.op for m, _ in KERNELS])
def test_lower_per_thread_with_16_byte_stores(module, shared, arch):
    src = lower_source(module.factory(arch=arch, dtype="bfloat16"), arch, "mhc_test")
    assert "tl::store_global_128(" in src and ("__shared__" in src) == shared
    assert "(H % 8) == 0" in src  # the runtime branch between vector and element accesses


@needs_tilelang
@pytest.mark.parametrize("r", [None, 4])
@pytest.mark.parametrize(
    ("module", "rows"),
    [(post_fwd, ("x", "residual")), (post_bwd, ("grad_out", "x", "residual"))],
    ids=["mhc_post", "mhc_post_backward"],
)
def test_post_reads_its_rows_with_16_byte_loads(module, rows, r):
    """Both variants (generic, and the R = 4 one the models run) load every input row 16
    bytes at a time on the aligned path: 2-byte loads held the backward at 19 % of copy."""
    assert {"R": 4} in module.SPEC.specs
    spec = {} if r is None else {"R": r}
    src = lower_source(module.factory(arch="sm_90a", dtype="bfloat16", **spec), "sm_90a", "t")
    for name in rows:
        assert f"*(uint4*)({name} + " in src, name


@pytest.mark.parametrize("module", [post_fwd, post_bwd], ids=["mhc_post", "mhc_post_backward"])
def test_post_static_r_out_of_range_is_refused(module):
    assert module.SPEC.spec_error({"dtype": "bfloat16"}, {"R": 4}) is None
    message = module.SPEC.spec_error({"dtype": "bfloat16"}, {"R": 9})
    assert message and "1 <= R <= 8" in message
    with pytest.raises(ValueError, match="out of range"):
        module.factory(arch="sm_90a", dtype="bfloat16", R=0)
