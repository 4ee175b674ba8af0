"""CPU tests of kernels_py/engram: the engram_gate forward and backward references against
independent float64 math (torch.nn.functional.rms_norm and autograd), per-branch weights, the
clamp and the signed-sqrt floor at s = 0 (clamp 0), the KernelSpec tables, and lowering smoke
tests (need tilelang, no GPU). Parity with TileKernels' reference: test_parity_mhc_engram.py."""

import math
import re

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.engram import engram_gate as fwd  # noqa: E402
from kernels_py.engram import engram_gate_backward as bwd  # noqa: E402
from kernels_py.engram import engram_gate_save as save  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
EPS = 1e-6


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


class _SignedSqrt(torch.autograd.Function):
    """sign(s) sqrt(|s|) with the kernels' floored derivative 0.5 / sqrt(max(|s|, 1e-6))."""

    @staticmethod
    def forward(ctx, s):
        ctx.save_for_backward(s)
        return torch.sign(s) * torch.sqrt(s.abs())

    @staticmethod
    def backward(ctx, grad):
        (s,) = ctx.saved_tensors
        return grad * 0.5 / torch.sqrt(s.abs().clamp(min=bwd.S_FLOOR))


def forward64(h, k, v, w_h, w_k, eps=EPS, floored=False, clamp=0.0):
    """Independent float64 forward: (out, g), differentiable; weights (H,) or (G, H)."""
    n = h.shape[-1]
    a = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + eps) * w_h
    b = k * torch.rsqrt(k.square().mean(-1, keepdim=True) + eps) * w_k
    s = torch.einsum("...j,...j->...", a, b) / math.sqrt(n)
    if clamp:  # below the clamp: sqrt(clamp) with the sign of s (autograd: gradient 0)
        a = s.abs()
        z = torch.sign(s) * torch.sqrt(torch.where(a < clamp, torch.full_like(a, clamp), a))
    elif floored:
        z = _SignedSqrt.apply(s)
    else:
        z = torch.sign(s) * torch.sqrt(s.abs())
    g = torch.sigmoid(z)
    return h + g.unsqueeze(-1) * v, g


def inputs(shape, dtype, scale_w=0.3, branches=False):
    """h, k, v, w_h, w_k; the weights (H,), or per branch (shape[-2], H) if `branches`."""
    wshape = tuple(shape[-2:]) if branches else (shape[-1],)
    h, k, v = (torch.randn(shape).to(dtype) for _ in range(3))
    w_h = (1 + scale_w * torch.randn(wshape)).to(dtype)
    w_k = (1 + scale_w * torch.randn(wshape)).to(dtype)
    return h, k, v, w_h, w_k


def grads64(go, h, k, v, w_h, w_k, floored=False, clamp=0.0):
    """(grad_h, grad_k, grad_v, grad_w_h, grad_w_k) by float64 autograd."""
    leaves = [x.double().requires_grad_() for x in (h, k, v, w_h, w_k)]
    out, _ = forward64(*leaves, floored=floored, clamp=clamp)
    return torch.autograd.grad(out, leaves, go.double())


def saved(h, k, v, w_h, w_k, eps=EPS, clamp=1e-6):
    """The forward's saved (dot, g, rstd_h, rstd_k), as the backward takes them."""
    return fwd.statistics(h, k, v, w_h, w_k, eps, clamp)[1:]


def backward(go, h, k, v, w_h, w_k, eps=EPS, clamp=1e-6):
    """bwd.reference fed the forward reference's statistics (as the autograd path does)."""
    return bwd.reference(go, h, k, v, w_h, w_k, saved(h, k, v, w_h, w_k, eps, clamp), clamp)


def rel_err(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


# --- forward --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES.values())
@pytest.mark.parametrize(
    ("shape", "branches"),
    [((5, 7), False), ((3, 4, 64), False), ((3, 4, 64), True), ((2, 1000), False),
     ((1, 2048), False), ((5, 1, 96), True)],
)  # fmt: skip
def test_forward_reference_matches_float64(dtype, shape, branches):
    h, k, v, w_h, w_k = inputs(shape, dtype, branches=branches)
    out, g = fwd.reference(h, k, v, w_h, w_k, EPS)
    want_out, want_g = forward64(*(x.double() for x in (h, k, v, w_h, w_k)))
    assert out.dtype == dtype and out.shape == h.shape
    assert g.dtype == torch.float32 and g.shape == h.shape[:-1]
    torch.testing.assert_close(g.double(), want_g, rtol=1e-5, atol=1e-6)
    tol = {torch.bfloat16: 1e-2, torch.float32: 1e-5}[dtype]
    torch.testing.assert_close(out.double(), want_out, rtol=tol, atol=tol)


@pytest.mark.parametrize("clamp", [0.0, 1e-6, 0.5])
def test_forward_gate_of_a_zero_row_is_one_half(clamp):
    h, k, v, w_h, w_k = inputs((3, 64), torch.float32)
    h[1] = 0
    k[2] = 0
    out, g = fwd.reference(h, k, v, w_h, w_k, EPS, clamp)
    assert g[1].item() == 0.5 and g[2].item() == 0.5  # sign(0) = 0, whatever the clamp
    torch.testing.assert_close(out[1], 0.5 * v[1])
    torch.testing.assert_close(out[2], h[2] + 0.5 * v[2])


def test_forward_gate_range_and_sign():
    h, k, v, w_h, w_k = inputs((64, 256), torch.float32)
    _, g_same = fwd.reference(h, h, v, w_h, w_h, EPS)  # s = sqrt(H) mean(a^2) > 0
    _, g_flip = fwd.reference(h, -h, v, w_h, w_h, EPS)
    assert (g_same > 0.5).all() and (g_flip < 0.5).all()
    torch.testing.assert_close(g_same + g_flip, torch.ones_like(g_same))  # sigmoid symmetry


def test_forward_clamp_raises_small_scores():
    h, k, v, w_h, w_k = (t.double() for t in inputs((64, 256), torch.float32))
    _, g0 = fwd.reference(h, k, v, w_h, w_k, EPS, 0.0)
    s = torch.special.logit(g0).square() * torch.sign(g0 - 0.5)  # sign(s) |s|, recovered
    clamp = s.abs().median().item()
    _, g = fwd.reference(h, k, v, w_h, w_k, EPS, clamp)
    small = s.abs() < clamp
    assert 10 < int(small.sum()) < 54
    want = torch.sigmoid(torch.sign(s) * math.sqrt(clamp))
    torch.testing.assert_close(g[small], want[small])
    torch.testing.assert_close(g[~small], g0[~small])


# --- backward -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "branches"), [((6, 16), False), ((2, 3, 64), False), ((2, 3, 64), True),
                            ((4, 1000), False), ((5, 4, 128), True)],
)  # fmt: skip
def test_backward_reference_matches_autograd_float64(shape, branches):
    x = [t.double() for t in inputs(shape, torch.float32, branches=branches)]
    go = torch.randn(shape, dtype=torch.float64)
    got = backward(go, *x)
    want = grads64(go, *x)
    for name, gt, w in zip(("h", "k", "v", "w_h", "w_k"), got, want, strict=True):
        assert gt.dtype == torch.float64 and gt.shape == w.shape, name
        torch.testing.assert_close(gt, w, rtol=1e-9, atol=1e-12, msg=f"grad_{name}")


@pytest.mark.parametrize("branches", [False, True])
@pytest.mark.parametrize("dtype", DTYPES.values())
def test_backward_reference_in_working_precision(dtype, branches):
    """bf16/fp32 inputs, fp32 math: within the tolerance the GPU tests use (1e-2 for bf16
    outputs, 1e-5 for fp32), normwise per gradient."""
    h, k, v, w_h, w_k = inputs((8, 4, 512), dtype, branches=branches)
    go = torch.randn(h.shape).to(dtype)
    got = backward(go, h, k, v, w_h, w_k)
    want = grads64(go, h, k, v, w_h, w_k)
    tol = {torch.bfloat16: 1e-2, torch.float32: 1e-5}[dtype]
    dtypes = (dtype, dtype, dtype, torch.float32, torch.float32)  # weight grads: fp32 (as TK)
    for name, gt, w, dt in zip(("h", "k", "v", "w_h", "w_k"), got, want, dtypes, strict=True):
        assert gt.dtype == dt, name
        assert rel_err(gt, w) < tol, (name, rel_err(gt, w))


def test_backward_at_s_zero_with_clamp_zero_uses_the_documented_floor():
    """A zero h row and a zero k row have s = 0: with clamp_value = 0 gradients are finite and
    equal autograd of a signed sqrt whose derivative is 0.5 / sqrt(max(|s|, 1e-6))."""
    x = [t.double() for t in inputs((4, 128), torch.float32)]
    x[0][1] = 0  # h row 1
    x[1][2] = 0  # k row 2
    go = torch.randn(4, 128, dtype=torch.float64)
    got = backward(go, *x, EPS, 0.0)
    want = grads64(go, *x, floored=True)
    for name, gt, w in zip(("h", "k", "v", "w_h", "w_k"), got, want, strict=True):
        assert torch.isfinite(gt).all(), name
        torch.testing.assert_close(gt, w, rtol=1e-9, atol=1e-9, msg=f"grad_{name}")
    plain = grads64(go, *x)  # the unfloored derivative is inf * 0 there
    assert not torch.isfinite(plain[0][1]).all()


@pytest.mark.parametrize("branches", [False, True])
def test_backward_below_the_clamp_passes_no_gradient_through_the_gate(branches):
    x = [t.double() for t in inputs((6, 2, 64), torch.float32, branches=branches)]
    x[0][1, 0] = 0  # s = 0 on one row
    go = torch.randn(6, 2, 64, dtype=torch.float64)
    _, g0 = fwd.reference(*x, EPS, 0.0)
    s = torch.special.logit(g0).square()
    ranked = s.flatten().sort().values
    clamp = (ranked[4] + ranked[5]).item() / 2  # 5 rows fall below, the zero row among them
    got = backward(go, *x, EPS, clamp)
    want = grads64(go, *x, clamp=clamp)
    for name, gt, w in zip(("h", "k", "v", "w_h", "w_k"), got, want, strict=True):
        torch.testing.assert_close(gt, w, rtol=1e-9, atol=1e-12, msg=f"grad_{name}")
    # Those rows' grad_h is grad_out itself (the residual), grad_k is 0.
    below = s < clamp
    torch.testing.assert_close(got[0][below], go[below])
    assert (got[1][below] == 0).all()


@pytest.mark.parametrize("branches", [False, True])
def test_weight_gradients_share_one_row_sum(branches):
    """grad_w_h = w_k * P and grad_w_k = w_h * P: their ratio is w_k / w_h."""
    h, k, v, w_h, w_k = (t.double() for t in inputs((16, 3, 32), torch.float32, branches=branches))
    go = torch.randn(16, 3, 32, dtype=torch.float64)
    _, _, _, gwh, gwk = backward(go, h, k, v, w_h, w_k)
    assert gwh.shape == w_h.shape and gwk.shape == w_k.shape
    torch.testing.assert_close(gwh * w_h, gwk * w_k)


# --- the backward's work split (a replay of block_rows and the reduction's block sets) --------


@pytest.mark.parametrize("gw", [1, 2, 4])
@pytest.mark.parametrize("tokens", [1, 5, 33, 1000])
@pytest.mark.parametrize("per_sm_blocks", [8, 396, 528])
def test_backward_blocks_cover_each_row_once_with_one_weight_row_per_block(
    gw, tokens, per_sm_blocks
):
    """As the kernels compute it (engram_gate_backward.block_rows; B as the wrapper picks it,
    a multiple of GW): every row is owned by exactly one block, each block's rows share the
    weight row ``b % GW``, and the reduction of weight row wb sums exactly those blocks."""
    m = tokens * gw
    blocks = min(m, per_sm_blocks)
    blocks -= blocks % gw
    owner = {}
    for b in range(blocks):
        for i in range(max(-(-(m - b) // blocks), 0)):  # block_rows: ceildiv(M - b, B)
            row = b + i * blocks
            assert row % gw == b % gw and row not in owner
            owner[row] = b
    assert sorted(owner) == list(range(m))
    for wb in range(gw):
        summed = {wb + gw * r for r in range(blocks // gw)}
        assert summed == {b for b in range(blocks) if b % gw == wb}


# --- specs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [fwd.SPEC, save.SPEC, bwd.SPEC], ids=lambda s: s.op)
def test_spec_tables(spec):
    import inspect

    names = [spec.variant_name(k, s) for k in spec.keys for s in spec.specs]
    assert len(names) == len(set(names))
    assert {} in [dict(s) for s in spec.specs]
    assert [spec.key_string(k) for k in spec.keys] == ["bf16", "fp32"]
    params = inspect.signature(spec.factory).parameters
    for key in spec.keys:
        for sp in spec.specs:
            assert set(key) | set(sp) <= set(params)
            assert spec.supports("sm_70", key, sp) and spec.supports("sm_100a", key, sp)
            assert spec.constraints(key, sp) == {}


def test_backward_blocks_per_sm_cover_every_static_variant():
    for key in bwd.SPEC.keys:
        for sp in bwd.SPEC.specs:
            if sp:
                assert (key["dtype"], sp["H"]) in bwd.BLOCKS_PER_SM
    assert bwd.blocks_per_sm("bfloat16", 1000) == bwd.GENERIC_BLOCKS_PER_SM


@pytest.mark.parametrize(
    ("dtype", "n", "threads"),
    [("bfloat16", 2048, 256), ("bfloat16", 4096, 256), ("bfloat16", 7168, 128),
     ("float32", 7168, 256)],
)  # fmt: skip
def test_row_threads(dtype, n, threads):
    assert fwd.row_threads(n, 16 // fwd.ITEMSIZE[dtype]) == threads


def test_factories_reject_bad_keys():
    with pytest.raises(ValueError, match="unsupported dtype"):
        fwd.factory(arch="sm_90a", dtype="float16")
    with pytest.raises(ValueError, match="unsupported dtype"):
        bwd.factory(arch="sm_90a", dtype="float16")


# --- lowering smoke tests (need tilelang, no GPU) -------------------------------------------


@needs_tilelang
def test_lower_forward_static_row_in_registers_with_16_byte_access():
    src = lower_source(fwd.factory(arch="sm_100a", dtype="bfloat16", H=7168), "sm_100a", "eg_test")
    assert src.count("*(uint4*)(h + ") == 1 and "*(uint4*)(out + " in src  # one load loop
    assert src.count("AllReduce<tl::SumOp, 128") == 3
    # No 32-byte global accesses on sm_100a (32-byte register vectors are fine).
    assert not re.search(r"\*\(u?longlong4\*\)\((h|k|v|w_h|w_k|out) ", src)


@needs_tilelang
def test_lower_backward_two_kernels_and_launch_bounds():
    src = lower_source(bwd.factory(arch="sm_90a", dtype="bfloat16", H=7168), "sm_90a", "egb_test")
    assert "__launch_bounds__(128, 3) egb_test_kernel(" in src
    assert "egb_test_kernel_1(" in src  # the weight-gradient reduction
    assert "atomic" not in src.lower()
