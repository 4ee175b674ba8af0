"""CPU tests of the Python layer of the mHC ops beyond sinkhorn (tests/test_python_api_sinkhorn.py):
validation before any launch, launch arguments, empty inputs, `out=`, and the eager autograd
glue. No GPU and no native module (see tests/_fakes.py)."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import STREAM, cpu_as_cuda, fake, refusals_test, t, tileaot  # noqa: E402, F401

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

expand = importlib.import_module("tileaot.expand_to_mhc").expand_to_mhc
expand_bwd = importlib.import_module("tileaot.expand_to_mhc_backward").expand_to_mhc_backward
post = importlib.import_module("tileaot.mhc_post").mhc_post
post_bwd = importlib.import_module("tileaot.mhc_post_backward").mhc_post_backward
pre_mix = importlib.import_module("tileaot.mhc_pre_apply_mix").mhc_pre_apply_mix
pre_mix_bwd = importlib.import_module(
    "tileaot.mhc_pre_apply_mix_backward"
).mhc_pre_apply_mix_backward
F32 = torch.float32

BAD_CALLS = [  # (id, call, exception, message regex)
    ("expand-float-mult", lambda: expand(t(4, 64), 4.0), TypeError, r"mhc_mult must be an int"),
    ("expand-zero-mult", lambda: expand(t(4, 64), 0), ValueError, r"mhc_mult must be >= 1; got 0"),
    (
        "expand-fp32",
        lambda: expand(t(4, 64, dtype=torch.float32), 4),
        TypeError,
        r"hidden has dtype torch\.float32",
    ),
    ("expand-out-shape", lambda: expand(t(4, 64), 4, out=t(4, 2, 64)), ValueError, r"out has"),
    (
        "expand-bwd-1d",
        lambda: expand_bwd(t(64)),
        ValueError,
        r"grad_out must have shape \(\.\.\., R, H\)",
    ),
    ("expand-bwd-out", lambda: expand_bwd(t(4, 2, 64), out=t(4, 2, 64)), ValueError, r"out has"),
    (
        "pre-mix-lead",
        lambda: pre_mix(t(2, 3, 4, 64), t(3, 2, 4, 1, dtype=F32)),
        ValueError,
        r"mix has leading dims \(3, 2\); they must match x's \(2, 3\)",
    ),
    (
        "pre-mix-not-1",
        lambda: pre_mix(t(3, 4, 64), t(3, 4, 2, dtype=F32)),
        ValueError,
        r"mix must have shape",
    ),
    ("pre-mix-r", lambda: pre_mix(t(3, 4, 64), t(3, 2, 1, dtype=F32)), ValueError, r"mix"),
    ("pre-mix-bf16-mix", lambda: pre_mix(t(3, 4, 64), t(3, 4, 1)), TypeError, r"mix has dtype"),
    (
        "pre-mix-bwd-lead",
        lambda: pre_mix_bwd(t(2, 3, 64), t(3, 2, 4, 64), t(2, 3, 4, 1, dtype=F32)),
        ValueError,
        r"x has leading dims \(3, 2\); they must match grad_out's \(2, 3\)",
    ),
    (
        "post-lead",
        lambda: post(
            t(2, 3, 64), t(3, 2, 4, 64), t(2, 3, 4, 1, dtype=F32), t(2, 3, 4, 4, dtype=F32)
        ),
        ValueError,
        r"residual has leading dims \(3, 2\); they must match x's \(2, 3\)",
    ),
    (
        "post-comb-r",
        lambda: post(t(3, 64), t(3, 4, 64), t(3, 4, 1, dtype=F32), t(3, 4, 2, dtype=F32)),
        ValueError,
        r"comb_res_mix",
    ),
    (
        "post-bwd-r9",
        lambda: post_bwd(
            t(3, 9, 8), t(3, 8), t(3, 9, 8), t(3, 9, 1, dtype=F32), t(3, 9, 9, dtype=F32)
        ),
        ValueError,
        r"R = 9 streams; mhc_post_backward supports R <= 8",
    ),
    (
        "pre-mix-bwd-h",
        lambda: pre_mix_bwd(t(3, 32), t(3, 4, 64), t(3, 4, 1, dtype=F32)),
        ValueError,
        r"x must have shape",
    ),
]


test_bad_calls_are_refused_before_any_launch = refusals_test(BAD_CALLS)


def test_expand_launch_and_out(fake, cpu_as_cuda):
    x = t(2, 3, 40)
    out = t(2, 3, 4, 40)
    assert expand(x, 4, out=out) is out
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("expand_to_mhc", "bf16")
    assert launch.ptrs == (x.data_ptr(), out.data_ptr()) and launch.shapes == (6, 40, 6, 4, 40)
    assert launch.stream == STREAM and launch.scalars == ()


def test_empty_calls_launch_nothing(fake, cpu_as_cuda):
    assert expand(t(0, 64), 4).shape == (0, 4, 64)
    assert expand_bwd(t(5, 4, 0)).shape == (5, 0)
    assert torch.equal(expand_bwd(t(3, 0, 8)), torch.zeros(3, 8, dtype=torch.bfloat16))  # R = 0
    assert not fake.launches


def test_expand_autograd_launches_the_backward_with_a_dense_gradient(fake, cpu_as_cuda):
    x = t(6, 64).requires_grad_()
    y = expand(x, 4)
    assert y.shape == (6, 4, 64) and y.grad_fn is not None
    y.sum().backward()  # the gradient arrives expanded (stride 0): it is made contiguous
    fwd, bwd = fake.launches
    assert fake.by_handle[bwd.handle] == ("expand_to_mhc_backward", "bf16")
    assert bwd.shapes == (6, 4, 64, 6, 64) and bwd.ptrs[1] == x.grad.data_ptr()
    with pytest.raises(ValueError, match="out= is not allowed when hidden requires grad"):
        expand(x, 4, out=t(6, 4, 64))
    with torch.no_grad():
        assert expand(x, 4).grad_fn is None


def test_pre_apply_mix_empty_sum_is_zeros(fake, cpu_as_cuda):
    got = pre_mix(t(3, 0, 8), t(3, 0, 1, dtype=F32))
    assert torch.equal(got, torch.zeros(3, 8, dtype=torch.bfloat16))
    grad_x, grad_mix = pre_mix_bwd(t(3, 0), t(3, 4, 0), t(3, 4, 1, dtype=F32))
    assert grad_x.shape == (3, 4, 0) and torch.equal(grad_mix, torch.zeros(3, 4, 1))
    assert not fake.launches


def test_pre_apply_mix_autograd_passes_the_saved_inputs(fake, cpu_as_cuda):
    x = t(6, 4, 64).requires_grad_()
    mix = t(6, 4, 1, dtype=F32)  # no gradient wanted: grad_mix is dropped
    y = pre_mix(x, mix)
    y.sum().backward()
    fwd, bwd = fake.launches
    assert fake.by_handle[bwd.handle] == ("mhc_pre_apply_mix_backward", "bf16")
    assert bwd.ptrs[1:3] == (x.data_ptr(), mix.data_ptr())
    assert bwd.ptrs[3] == x.grad.data_ptr() and mix.grad is None
    with pytest.raises(ValueError, match="out= is not allowed when x or mix requires grad"):
        pre_mix(x, mix, out=t(6, 64))


def test_post_autograd_passes_the_saved_inputs(fake, cpu_as_cuda):
    inputs = [t(6, 64), t(6, 4, 64), t(6, 4, 1, dtype=F32), t(6, 4, 4, dtype=F32)]
    inputs[1].requires_grad_()
    inputs[3].requires_grad_()
    post(*inputs).sum().backward()
    fwd, bwd = fake.launches
    assert fake.by_handle[bwd.handle] == ("mhc_post_backward", "bf16")
    assert bwd.ptrs[1:5] == tuple(v.data_ptr() for v in inputs)
    assert inputs[1].grad.shape == (6, 4, 64) and inputs[3].grad.shape == (6, 4, 4)
    assert inputs[0].grad is None and inputs[2].grad is None


def test_post_backward_without_sums_is_zeros(fake, cpu_as_cuda):
    grads = post_bwd(t(3, 4, 0), t(3, 0), t(3, 4, 0), t(3, 4, 1, dtype=F32), t(3, 4, 4, dtype=F32))
    assert torch.equal(grads[2], torch.zeros(3, 4, 1)) and torch.equal(
        grads[3], torch.zeros(3, 4, 4)
    )
    assert not fake.launches
