"""CPU tests of mhc_pre_norm_fn's and mhc_pre_norm_fn_backward's Python layer: validation
before any launch, the launches' arguments (mhc_fn viewed by stream, the norm weight
multiplied first, the scratch), empty inputs, `out=`, and autograd through the backward op
(the weight's gradient through torch's multiply, checked with the kernel's reference standing
in for the backward launch). No GPU and no native module (tests/_fakes.py)."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import STREAM, cpu_as_cuda, fake, refusals_test, t  # noqa: E402, F401

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

norm_module = importlib.import_module("tileaot.mhc_pre_norm_fn")
norm_fn = norm_module.mhc_pre_norm_fn
bwd_module = importlib.import_module("tileaot.mhc_pre_norm_fn_backward")
norm_bwd = bwd_module.mhc_pre_norm_fn_backward
F32 = torch.float32


def fn(n: int = 24, k: int = 256) -> torch.Tensor:
    return t(n, k, dtype=F32)


BAD_CALLS = [  # (id, call, exception, message regex)
    ("fp32-residual", lambda: norm_fn(t(3, 4, 64, dtype=F32), fn()), TypeError, r"residual"),
    ("bf16-fn", lambda: norm_fn(t(3, 4, 64), t(24, 256)), TypeError, r"mhc_fn has dtype"),
    (
        "fn-columns",
        lambda: norm_fn(t(3, 4, 64), fn(24, 255)),
        ValueError,
        r"mhc_fn has shape \(24, 255\); it must be \[N, R \* H\] = \[N, 256\]",
    ),
    ("fn-1d", lambda: norm_fn(t(3, 4, 64), t(256, dtype=F32)), ValueError, r"mhc_fn has shape"),
    ("residual-1d", lambda: norm_fn(t(64), fn()), ValueError, r"residual must be \[\.\.\., R, H\]"),
    (
        "n-33",
        lambda: norm_fn(t(3, 4, 64), fn(33)),
        ValueError,
        r"mhc_fn has N = 33 rows; mhc_pre_norm_fn supports N <= 32",
    ),
    (
        "weight-shape",
        lambda: norm_fn(t(3, 4, 64), fn(), t(64, dtype=F32)),
        ValueError,
        r"mhc_norm_weight has shape \(64,\); it must be \[R \* H\] = \[256\]",
    ),
    (
        "weight-dtype",
        lambda: norm_fn(t(3, 4, 64), fn(), t(256)),
        TypeError,
        r"mhc_norm_weight must be torch\.float32",
    ),
    ("eps-negative", lambda: norm_fn(t(3, 4, 64), fn(), None, -1.0), ValueError, r"mhc_norm_eps"),
    ("eps-str", lambda: norm_fn(t(3, 4, 64), fn(), None, "1e-6"), TypeError, r"mhc_norm_eps"),
    (
        "no-values",
        lambda: norm_fn(t(3, 4, 0), fn(24, 0)),
        ValueError,
        r"R \* H = 0 values per token",
    ),
    (
        "out-shape",
        lambda: norm_fn(t(3, 4, 64), fn(), out=t(3, 23, dtype=F32)),
        ValueError,
        r"out has",
    ),
    (
        "grad-out",
        lambda: norm_fn(t(3, 4, 64), fn().requires_grad_(), out=t(3, 24, dtype=F32)),
        ValueError,
        r"out= is not allowed when an input requires grad",
    ),
]
test_bad_calls_are_refused_before_any_launch = refusals_test(BAD_CALLS)

BAD_BACKWARD_CALLS = [
    (
        "lead",
        lambda: norm_bwd(t(2, 3, 24, dtype=F32), t(3, 2, 4, 64), fn()),
        ValueError,
        r"out_grad has leading dims \(2, 3\); they must match residual's \(3, 2\)",
    ),
    (
        "n",
        lambda: norm_bwd(t(3, 23, dtype=F32), t(3, 4, 64), fn()),
        ValueError,
        r"mhc_fn",
    ),
    (
        "n-33",
        lambda: norm_bwd(t(3, 33, dtype=F32), t(3, 4, 64), fn(33)),
        ValueError,
        r"mhc_fn has N = 33 rows; mhc_pre_norm_fn_backward supports N <= 32",
    ),
    (
        "fn-columns",
        lambda: norm_bwd(t(3, 24, dtype=F32), t(3, 4, 64), fn(24, 255)),
        ValueError,
        r"mhc_fn has shape \(24, 255\)",
    ),
    ("bf16-grad", lambda: norm_bwd(t(3, 24), t(3, 4, 64), fn()), TypeError, r"out_grad"),
    (
        "eps",
        lambda: norm_bwd(t(3, 24, dtype=F32), t(3, 4, 64), fn(), -1.0),
        ValueError,
        r"mhc_norm_eps",
    ),
    (
        "no-values",
        lambda: norm_bwd(t(3, 24, dtype=F32), t(3, 4, 0), fn(24, 0)),
        ValueError,
        r"R \* H = 0 values per token",
    ),
    (
        "out-shape",
        lambda: norm_bwd(
            t(3, 24, dtype=F32), t(3, 4, 64), fn(), out=(t(3, 4, 64), t(24, 255, dtype=F32))
        ),
        ValueError,
        r"mhc_fn_grad",
    ),
]
test_bad_backward_calls_are_refused_before_any_launch = refusals_test(BAD_BACKWARD_CALLS)


def test_launch_views_mhc_fn_by_stream(fake, cpu_as_cuda):
    residual, f = t(2, 3, 4, 64), fn()
    out = t(2, 3, 24, dtype=F32)
    assert norm_fn(residual, f, None, 1e-5, out=out) is out
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("mhc_pre_norm_fn", "bf16")
    assert launch.ptrs[:3] == (residual.data_ptr(), f.data_ptr(), out.data_ptr())
    # residual, mhc_fn, out, then the scratch part [16, M, 33] of the column slices
    assert launch.shapes == (6, 4, 64, 24, 4, 64, 6, 24, 16, 6, 33)
    assert launch.stream == STREAM and launch.scalars == pytest.approx((1e-5,))
    assert norm_module.SCHEMA.workspace_size({"M": 2049, "N": 24, "R": 4, "H": 64}) == (
        16 * 2049 * 33 * 4
    )


def test_by_stream_layout_and_no_grad(fake, cpu_as_cuda):
    f = fn().view(24, 4, 64).requires_grad_()
    with torch.no_grad():
        y = norm_fn(t(5, 4, 64), f)
    assert y.shape == (5, 24) and y.dtype == F32 and y.grad_fn is None
    (launch,) = fake.launches
    assert launch.ptrs[1] == f.data_ptr() and launch.scalars == pytest.approx((1e-6,))


def test_norm_weight_is_multiplied_into_mhc_fn(fake, cpu_as_cuda):
    f, w = fn(), torch.full((256,), 2.0)
    norm_fn(t(5, 4, 64), f, w, 1e-6)
    (launch,) = fake.launches
    assert launch.ptrs[1] not in (f.data_ptr(), w.data_ptr())  # a new product tensor


def test_empty_calls_launch_nothing(fake, cpu_as_cuda):
    assert norm_fn(t(0, 4, 64), fn()).shape == (0, 24)
    assert norm_fn(t(2, 0, 4, 64), fn()).shape == (2, 0, 24)
    assert norm_fn(t(3, 4, 64), fn(0)).shape == (3, 0)
    assert not fake.launches


def test_backward_launch_views_mhc_fn_by_stream(fake, cpu_as_cuda):
    g, residual, f = t(2, 3, 24, dtype=F32), t(2, 3, 4, 64), fn()
    x_grad, fn_grad = norm_bwd(g, residual, f, 1e-5)
    assert (x_grad.shape, x_grad.dtype) == ((2, 3, 4, 64), torch.bfloat16)
    assert (fn_grad.shape, fn_grad.dtype) == ((24, 256), F32)  # mhc_fn's own layout
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("mhc_pre_norm_fn_backward", "bf16")
    tensors = (g, residual, f, x_grad, fn_grad)
    assert launch.ptrs[:5] == tuple(v.data_ptr() for v in tensors)
    # out_grad, residual, mhc_fn, residual_grad, mhc_fn_grad, stats [M, N + 1], part [16, M, 33]
    assert launch.shapes == (6, 24, 6, 4, 64, 24, 4, 64, 6, 4, 64, 24, 4, 64, 6, 25, 16, 6, 33)
    assert launch.scalars == pytest.approx((1e-5,))
    # stats (rounded up to 16 bytes), then the forward's column-slice sums
    dims = {"M": 2049, "N": 24, "R": 4, "H": 64}
    assert bwd_module.SCHEMA.workspace_size(dims) == 204912 + 16 * 2049 * 33 * 4


def test_backward_out_and_empty_calls(fake, cpu_as_cuda):
    outs = (t(3, 4, 64), t(24, 4, 64, dtype=F32))
    got = norm_bwd(t(3, 24, dtype=F32), t(3, 4, 64), fn().view(24, 4, 64), out=outs)
    assert got[0] is outs[0] and got[1] is outs[1]
    fake.launches.clear()
    x_grad, fn_grad = norm_bwd(t(0, 24, dtype=F32), t(0, 4, 64), torch.ones(24, 256))
    assert x_grad.shape == (0, 4, 64) and torch.equal(fn_grad, torch.zeros(24, 256))
    x_grad, fn_grad = norm_bwd(t(3, 0, dtype=F32), torch.ones(3, 4, 64).bfloat16(), fn(0))
    assert torch.equal(x_grad, torch.zeros(3, 4, 64, dtype=torch.bfloat16))
    assert fn_grad.shape == (0, 256)
    assert not fake.launches


def test_autograd_launches_the_backward_with_the_saved_inputs(fake, cpu_as_cuda):
    residual, f = t(5, 4, 64).requires_grad_(), fn().requires_grad_()
    y = norm_fn(residual, f, None, 1e-5)
    assert y.shape == (5, 24) and y.grad_fn is not None
    y.sum().backward()  # an expanded (stride-0) gradient: made contiguous
    fwd, bwd = fake.launches
    assert fake.by_handle[bwd.handle] == ("mhc_pre_norm_fn_backward", "bf16")
    assert bwd.ptrs[1:3] == (residual.data_ptr(), f.data_ptr())
    assert bwd.ptrs[3] == residual.grad.data_ptr() and bwd.scalars == fwd.scalars
    assert residual.grad.shape == (5, 4, 64) and f.grad.shape == (24, 256)


def test_autograd_gradients_of_all_three(fake, cpu_as_cuda, monkeypatch):
    """The chain around the backward op (the [N, R * H] view, the weight's multiply), with the
    kernel's reference standing in for the backward launch: autograd through TileKernels'
    reference gives the same gradients."""
    from _tile_kernels import tk

    from kernels_py.mhc import mhc_pre_norm_fn_backward as ref_bwd

    monkeypatch.setattr(bwd_module, "mhc_pre_norm_fn_backward", ref_bwd.reference)
    grad_functions = importlib.import_module("tileaot._grad")._FUNCTIONS
    monkeypatch.delitem(grad_functions, "mhc_pre_norm_fn", raising=False)  # built anew
    g = torch.Generator().manual_seed(5)
    residual = torch.randn(7, 4, 64, generator=g).bfloat16()
    f = torch.randn(24, 256, generator=g) * 1e-2
    w = torch.randn(256, generator=g) * 0.1 + 1.0
    grad = torch.randn(7, 24, generator=g)
    leaves = [v.clone().requires_grad_() for v in (residual, f, w)]
    norm_fn(*leaves, 1e-6).backward(grad)
    want = [v.clone().requires_grad_() for v in (residual, f, w)]
    tk("mhc").mhc_pre_norm_fn_ref(want[0].unsqueeze(0), *want[1:], 1e-6)[0].backward(grad)
    torch.testing.assert_close(leaves[0].grad.float(), want[0].grad.float(), rtol=2**-7, atol=1e-5)
    for a, b in zip(leaves[1:], want[1:], strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
