"""CPU parity of our mHC references with TileKernels' (`tile-kernels` 1.0.0), op by op.

As tests/test_parity_mhc_engram.py does for sinkhorn: our reference (`kernels_py/mhc/<op>.py`,
what the GPU tests hold the kernels to) must compute what ``tile_kernels.torch.mhc`` computes,
forward, and backward against autograd of TileKernels' reference (what TileKernels' own
backward tests compare with), within the bounds of TileKernels' tests:

* expand_to_mhc: a copy, and its gradient a sum of R bf16 values in float32 rounded once:
  bit-exact both (TileKernels has no test of its own for it).
* mhc_pre_apply_mix: ``atol=1e-2, rtol=1e-3`` on the output, ``grad_x`` and ``grad_mix``
  (TileKernels' ``tests/mhc/test_pre_apply_mix.py``, on its data: ``x = randn.sigmoid()``,
  ``mix = randn.softmax(-2)``).
* mhc_post: ``assert_close`` defaults on the output, ``grad_x`` and ``grad_residual`` (bf16),
  ``atol = rtol = 1e-4`` on ``grad_post_layer_mix`` and ``grad_comb_res_mix`` (TileKernels'
  ``tests/mhc/test_post.py``, on its data: all ``randn``).

Sizes are the issue's matrix: mhc_mult n in {4, 8}, hidden in {2048, 4096, 7168}, odd token
counts (small, to keep the CPU time short).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _tile_kernels import tk  # noqa: E402

from kernels_py.mhc import expand_to_mhc as expand_fwd  # noqa: E402
from kernels_py.mhc import expand_to_mhc_backward as expand_bwd  # noqa: E402
from kernels_py.mhc import mhc_post as post_fwd  # noqa: E402
from kernels_py.mhc import mhc_post_backward as post_bwd  # noqa: E402
from kernels_py.mhc import mhc_pre_apply_mix as pre_mix_fwd  # noqa: E402
from kernels_py.mhc import mhc_pre_apply_mix_backward as pre_mix_bwd  # noqa: E402

MHC_N = (4, 8)
HIDDEN = (2048, 4096, 7168)
TOKENS = (1, 7, 33)
BF16, F32 = torch.bfloat16, torch.float32


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int16)


@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("n", MHC_N)
def test_expand_to_mhc_forward_and_backward_match_tile_kernels(n, hidden, tokens):
    ref_fn = tk("mhc").expand_to_mhc_ref
    x = torch.randn(2, tokens, hidden).to(BF16)
    grad_out = torch.randn(2, tokens, n, hidden).to(BF16)

    leaf = x.clone().requires_grad_(True)
    want = ref_fn(leaf, n)
    want.backward(grad_out)
    got = expand_fwd.reference(x, n)
    grad = expand_bwd.reference(grad_out)
    assert got.dtype == grad.dtype == BF16 and got.shape == (2, tokens, n, hidden)
    assert torch.equal(_bits(got), _bits(want.detach()))
    assert grad.shape == leaf.grad.shape and torch.equal(_bits(grad), _bits(leaf.grad))


@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("n", MHC_N)
def test_mhc_pre_apply_mix_forward_and_backward_match_tile_kernels(n, hidden, tokens):
    ref_fn = tk("mhc").mhc_pre_apply_mix_ref
    x = torch.randn(2, tokens, n, hidden).to(BF16).sigmoid()
    mix = torch.randn(2, tokens, n, 1).softmax(-2)
    grad_out = torch.randn(2, tokens, hidden).to(BF16)

    xl, ml = x.clone().requires_grad_(True), mix.clone().requires_grad_(True)
    want = ref_fn(xl, ml)
    want.backward(grad_out)
    got = pre_mix_fwd.reference(x, mix)
    grad_x, grad_mix = pre_mix_bwd.reference(grad_out, x, mix)
    assert (got.dtype, grad_x.dtype, grad_mix.dtype) == (BF16, BF16, torch.float32)
    bound = {"atol": 1e-2, "rtol": 1e-3}  # TileKernels' test
    torch.testing.assert_close(got, want.detach(), **bound)
    torch.testing.assert_close(grad_x, xl.grad, **bound)
    torch.testing.assert_close(grad_mix, ml.grad, **bound)


@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("n", MHC_N)
def test_mhc_post_forward_and_backward_match_tile_kernels(n, hidden, tokens):
    ref_fn = tk("mhc").mhc_post_ref
    x = torch.randn(2, tokens, hidden).to(BF16)
    residual = torch.randn(2, tokens, n, hidden).to(BF16)
    post = torch.randn(2, tokens, n, 1)
    comb = torch.randn(2, tokens, n, n)
    grad_out = torch.randn(2, tokens, n, hidden).to(BF16)

    leaves = [t.clone().requires_grad_(True) for t in (x, residual, post, comb)]
    want = ref_fn(*leaves)
    want.backward(grad_out)
    got = post_fwd.reference(x, residual, post, comb)
    grads = post_bwd.reference(grad_out, x, residual, post, comb)
    assert got.dtype == BF16 and [g.dtype for g in grads] == [BF16, BF16, F32, F32]
    torch.testing.assert_close(got, want.detach())  # TileKernels' test: defaults
    for grad, leaf in zip(grads, leaves, strict=True):
        if grad.dtype == BF16:
            torch.testing.assert_close(grad, leaf.grad)
        else:
            torch.testing.assert_close(grad, leaf.grad, atol=1e-4, rtol=1e-4)
