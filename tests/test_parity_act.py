"""Parity of our swiglu reference with TileKernels 1.0.0's `tile_kernels.torch.swiglu.
swiglu_forward`, on the CPU.

TileKernels' reference computes ``x_left / (1 + exp(-x_left)) * x_right`` in fp32 and returns
fp32; ours (which tests/test_gpu_swiglu.py holds the kernel to, bit for bit) computes the same
operations in the same order and stores in x's dtype. So ours equals TileKernels' result
rounded to x's dtype, exactly, NaNs in the same places — for the dtypes TileKernels takes (bf16,
fp32), odd token counts, and rows that probe the edges (zeros, -0.0, ±inf, NaN, huge values
where exp(-g) overflows, tiny ones).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _tile_kernels import tk  # noqa: E402

from kernels_py.act import swiglu  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
TOKENS = (1, 7, 129, 4001)


def _inputs(m: int, h: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, 2 * h, generator=g) * 4
    huge = torch.finfo(dtype).max
    edges = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), huge, -huge])
    edges = torch.cat([edges, torch.tensor([1e-38, -1e-38, 88.8, -88.8, 104.0, -104.0])])
    for i in range(0, m, 3):  # every third row: the edges in both halves, at shifted places
        x[i, : len(edges)] = edges.roll(i)
        x[i, h : h + len(edges)] = edges.roll(i + 1)
    if m > 1:  # silu(+inf) * 2 = +inf; silu(huge) * huge overflows
        x[1, :2] = torch.tensor([float("inf"), huge])
        x[1, h : h + 2] = torch.tensor([2.0, huge])
    return x.to(dtype)


@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("key", DTYPES)
def test_swiglu_matches_tile_kernels(key, tokens):
    h = 640 if tokens == 4001 else 2048
    x = _inputs(tokens, h, DTYPES[key], seed=tokens)
    theirs = tk("swiglu").swiglu_forward(x)
    assert theirs.dtype == torch.float32 and theirs.shape == (tokens, h)
    ours = swiglu.reference(x)
    assert ours.dtype == x.dtype
    torch.testing.assert_close(ours, theirs.to(x.dtype), rtol=0, atol=0, equal_nan=True)


def test_the_edges_are_exercised():
    """The edge rows reach the cases that matter: NaN outputs and saturated silu."""
    y = tk("swiglu").swiglu_forward(_inputs(7, 64, torch.float32, seed=0))
    assert y.isnan().any() and y.isinf().any() and (y == 0).any()
