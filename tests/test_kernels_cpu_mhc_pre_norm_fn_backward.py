"""CPU tests of mhc_pre_norm_fn_backward (kernels_py/mhc/mhc_pre_norm_fn_backward.py): the
reference against float64 autograd of the forward's formula and against autograd through
TileKernels' reference (`tile-kernels` 1.0.0, ``tile_kernels.torch.mhc.mhc_pre_norm_fn_ref``),
with and without a norm weight, and the kernels' lowering for every default arch (TileLang on
the CPU, no GPU)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402

from kernels_py.mhc import mhc_pre_norm_fn_backward as bwd  # noqa: E402
from kernels_py.spec import DEFAULT_ARCHS  # noqa: E402

BF16, F32, F64 = torch.bfloat16, torch.float32, torch.float64
TOKENS = (0, 1, 7, 129, 1031)


def _inputs(tokens: int, r: int = 4, h: int = 64, n: int | None = None):
    """TileKernels' test data (per-stream scales, fn ~ 1e-4) and a gradient of the mixes."""
    n = r * (2 + r) if n is None else n
    streams = 1 + 0.01 * torch.arange(r).view(1, -1, 1)
    residual = (torch.randn(tokens, r, h) * streams).to(BF16)
    fn = (torch.randn(n, r, h) * 1e-4 * streams).flatten(1)
    return residual, fn, torch.randn(tokens, n)


def _float64_grads(residual, fn, g, eps):
    """Autograd, in float64, of the documented forward ``(x . fn[n]) * rsqrt(mean(x**2) +
    eps)`` (written here, no shared code)."""
    x = residual.double().flatten(1).requires_grad_()
    f = fn.double().requires_grad_()
    out = (x @ f.t()) * (x.square().mean(-1, keepdim=True) + eps).rsqrt()
    out.backward(g.double())
    return x.grad.view(residual.shape), f.grad


def _bf16_close(got, want):
    """residual_grad: one bf16 rounding of a float32 value (2**-8 relative) and the float32
    sums' error."""
    scale = float(want.abs().max()) if want.numel() else 0.0
    torch.testing.assert_close(got.double(), want, rtol=2**-8, atol=1e-6 * scale)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize(("r", "n"), [(4, None), (1, 3), (2, 8), (8, 32), (4, 5)])
def test_reference_against_float64_autograd(tokens, r, n):
    residual, fn, g = _inputs(tokens, r, 48 if tokens > 1000 else 96, n)
    x_grad, fn_grad = bwd.reference(g, residual, fn, 1e-6)
    assert (x_grad.dtype, x_grad.shape) == (BF16, residual.shape)
    assert (fn_grad.dtype, fn_grad.shape) == (F32, fn.shape)
    want_x, want_fn = _float64_grads(residual, fn, g, 1e-6)
    _bf16_close(x_grad, want_x)
    # a sum over tokens of float32 products: float32 summation error
    torch.testing.assert_close(
        fn_grad.double(), want_fn, rtol=1e-5, atol=1e-6 * math.sqrt(tokens + 1)
    )
    # [N, R, H] in, [N, R, H] out
    by_stream = bwd.reference(g, residual, fn.view(-1, r, residual.shape[-1]), 1e-6)
    assert torch.equal(by_stream[0], x_grad) and torch.equal(by_stream[1].flatten(1), fn_grad)


@pytest.mark.parametrize("h", [2048, 4096, 7168])
@pytest.mark.parametrize("weighted", [False, True])
def test_reference_against_autograd_through_tile_kernels(h, weighted):
    """TileKernels' reference (float32 math) differentiated by torch: the weight's gradient is
    the chain rule through ``fn = mhc_fn * weight``, as our wrappers compute it in torch."""
    residual, fn, g = _inputs(9, 4, h)
    w = torch.randn(4 * h) * 0.1 + 1.0 if weighted else None
    x = residual.clone().requires_grad_()
    f = fn.clone().requires_grad_()
    wl = None if w is None else w.clone().requires_grad_()
    out = tk("mhc").mhc_pre_norm_fn_ref(x.unsqueeze(0), f, wl, 1e-6)[0]
    out.backward(g)
    eff = fn if w is None else fn * w
    x_grad, fn_grad = bwd.reference(g, residual, eff, 1e-6)
    torch.testing.assert_close(x_grad.float(), x.grad.float(), rtol=2**-7, atol=1e-5)
    if w is None:
        torch.testing.assert_close(fn_grad, f.grad, rtol=1e-4, atol=1e-5)
    else:
        torch.testing.assert_close(fn_grad * w, f.grad, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close((fn_grad * fn).sum(0), wl.grad, rtol=1e-4, atol=1e-5)


def test_a_zero_row_and_eps_zero():
    """A zero row has d = 0 and s = 0: its gradient is ``(g * rsqrt(eps)) @ mhc_fn`` (the s
    term vanishes) and it adds nothing to mhc_fn_grad; eps = 0 is the plain RMS."""
    residual, fn, g = _inputs(3, h=16)
    residual[1] = 0
    x_grad, fn_grad = bwd.reference(g, residual, fn, 1e-6)
    want = (g[1] / math.sqrt(1e-6)) @ fn
    torch.testing.assert_close(x_grad[1].float().flatten(), want, rtol=2**-8, atol=1e-6)
    _, without = bwd.reference(g[[0, 2]], residual[[0, 2]], fn, 1e-6)
    torch.testing.assert_close(fn_grad, without)
    got_x, got_fn = bwd.reference(g[[0, 2]], residual[[0, 2]], fn, 0.0)
    want_x, want_fn = _float64_grads(residual[[0, 2]], fn, g[[0, 2]], 0.0)
    _bf16_close(got_x, want_x)
    torch.testing.assert_close(got_fn.double(), want_fn, rtol=1e-5, atol=1e-6)


def test_static_n_out_of_range_is_refused():
    assert {"N": 24} in bwd.SPEC.specs and {} in bwd.SPEC.specs
    message = bwd.SPEC.spec_error({"dtype": "bfloat16"}, {"N": 33})
    assert (
        message and message.startswith("mhc_pre_norm_fn_backward: ") and "1 <= N <= 32" in message
    )
    with pytest.raises(ValueError, match="out of range"):
        bwd.factory(arch="sm_90a", dtype="bfloat16", N=0)


@needs_tilelang
@pytest.mark.parametrize("arch", DEFAULT_ARCHS)
@pytest.mark.parametrize("n", [None, 24])
def test_lower_for_every_default_arch(arch, n):
    spec = {} if n is None else {"N": n}
    src = lower_source(bwd.factory(arch=arch, dtype="bfloat16", **spec), arch, "norm_bwd_test")
    assert src.count("__global__ void __launch_bounds__") == 3  # mul, grad_norm, grad_mul
    assert "atomic" not in src.lower()  # every sum in a fixed order
    assert "__shfl_xor_sync" in src or "shfl_xor" in src
    assert src.count("+ 4096) & -8192") >= 2  # mhc_fn and gd rounded to TF32 (round_to_tf32)
    tensor_cores = arch not in ("sm_70", "sm_75")  # the forward's test says why
    assert ("mma_sync<tl::DataType::kTensorFloat32" in src) == tensor_cores
    assert "wgmma" not in src and "tcgen05" not in src
