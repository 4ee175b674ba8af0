"""CPU tests of mhc_pre_norm_fn's Python layer: validation before any launch, the launch's
arguments (mhc_fn viewed by stream, the norm weight multiplied first), empty inputs, `out=`,
and the refusal of calls that would record a gradient. No GPU and no native module
(tests/_fakes.py)."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import STREAM, cpu_as_cuda, fake, refusals_test, t  # noqa: E402, F401

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

norm_fn = importlib.import_module("tileaot.mhc_pre_norm_fn").mhc_pre_norm_fn
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
        "grad",
        lambda: norm_fn(t(3, 4, 64), fn().requires_grad_()),
        ValueError,
        r"mhc_pre_norm_fn has no backward yet",
    ),
]
test_bad_calls_are_refused_before_any_launch = refusals_test(BAD_CALLS)


def test_launch_views_mhc_fn_by_stream(fake, cpu_as_cuda):
    residual, f = t(2, 3, 4, 64), fn()
    out = t(2, 3, 24, dtype=F32)
    assert norm_fn(residual, f, None, 1e-5, out=out) is out
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("mhc_pre_norm_fn", "bf16")
    assert launch.ptrs == (residual.data_ptr(), f.data_ptr(), out.data_ptr())
    assert launch.shapes == (6, 4, 64, 24, 4, 64, 6, 24)
    assert launch.stream == STREAM and launch.scalars == pytest.approx((1e-5,))


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
