"""CPU tests of the Python layer of the mHC ops beyond sinkhorn (tests/test_python_api_sinkhorn.py):
validation before any launch, launch arguments, empty inputs, `out=`, and the eager autograd
glue. No GPU and no native module (see tests/_fakes.py)."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import STREAM, cpu_as_cuda, fake, t, tileaot  # noqa: E402, F401

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

expand = importlib.import_module("tileaot.expand_to_mhc").expand_to_mhc
expand_bwd = importlib.import_module("tileaot.expand_to_mhc_backward").expand_to_mhc_backward

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
]


@pytest.mark.parametrize(
    ("call", "exc", "msg"), [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS]
)
def test_bad_calls_are_refused_before_any_launch(fake, cpu_as_cuda, call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()
    assert not fake.launches


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
