"""CPU tests of the sinkhorn_normalize(_backward) Python layer: validation before any launch,
launch arguments, empty inputs, `out=`, and the autograd glue (a differentiable call launches
the forward, then the backward with the saved logits). No GPU and no native module (see
tests/_fakes.py)."""

from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")

from _fakes import STREAM, Launch, cpu_as_cuda, fake, meta, misaligned, refusals_test, t, tileaot  # noqa: E402, F401
from _kernel_args import check_launch  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

sk = importlib.import_module("tileaot.sinkhorn_normalize").sinkhorn_normalize
skb = importlib.import_module("tileaot.sinkhorn_normalize_backward").sinkhorn_normalize_backward
F32 = torch.float32


def L(*shape: int) -> torch.Tensor:  # noqa: N802
    return t(*shape, dtype=F32)


# (id, call, exception, message regex): each call breaks exactly one rule.
BAD_CALLS = [
    ("x-list", lambda: sk([[1.0]]), TypeError, r"logits must be a torch\.Tensor, got list"),
    (
        "x-bf16",
        lambda: sk(t(4, 4, 4)),
        TypeError,
        r"logits has dtype torch\.bfloat16; it must be torch\.float32$",
    ),
    (
        "x-1d",
        lambda: sk(L(4)),
        ValueError,
        r"logits must have shape \(\.\.\., N, N\); got shape \(4,\)",
    ),
    ("x-not-square", lambda: sk(L(2, 4, 8)), ValueError, r"got \(2, 4, 8\)"),
    ("x-n17", lambda: sk(L(2, 17, 17)), ValueError, r"N = 17; sinkhorn_normalize supports N <= 16"),
    ("rep-float", lambda: sk(L(2, 4, 4), 10.0), TypeError, r"repeat must be an int, got float"),
    ("rep-bool", lambda: sk(L(2, 4, 4), True), TypeError, r"repeat must be an int, got bool"),
    ("rep-none", lambda: sk(L(2, 4, 4), None), TypeError, r"repeat must be an int, got NoneType"),
    ("rep-neg", lambda: sk(L(2, 4, 4), -1), ValueError, r"repeat must be in \[1, 65536\]; got -1"),
    ("rep-big", lambda: sk(L(2, 4, 4), 2**16 + 1), ValueError, r"repeat must be in \[1, 65536\]"),
    ("rep-zero", lambda: sk(L(2, 4, 4), 0), ValueError, r"repeat must be in \[1, 65536\]; got 0"),
    ("eps-str", lambda: sk(L(2, 4, 4), 3, "0"), TypeError, r"eps must be a real number"),
    ("eps-neg", lambda: sk(L(2, 4, 4), 3, -1e-6), ValueError, r"eps must be finite and >= 0"),
    ("eps-nan", lambda: sk(L(2, 4, 4), 3, math.nan), ValueError, r"eps must be finite"),
    ("eps-inf", lambda: sk(L(2, 4, 4), 3, math.inf), ValueError, r"eps must be finite"),
    ("x-strided", lambda: sk(L(4, 4, 2).transpose(0, 2)), ValueError, r"logits is not contiguous"),
    ("x-misaligned", lambda: sk(misaligned(2, 4, 4, dtype=F32)), ValueError, r"16-byte aligned"),
    (
        "x-int32-size",
        lambda: sk(meta(2**27, 4, 4, dtype=F32)),
        ValueError,
        r"2147483648 elements.*below 2\*\*31",
    ),
    ("out-list", lambda: sk(L(2, 4, 4), out=[0]), TypeError, r"out must be a torch\.Tensor"),
    ("out-dtype", lambda: sk(L(2, 4, 4), out=t(2, 4, 4)), TypeError, r"out has dtype torch\.bf"),
    (
        "out-shape",
        lambda: sk(L(2, 4, 4), out=L(4, 4, 2)),
        ValueError,
        r"out has shape \(4, 4, 2\); this call writes \(2, 4, 4\)",
    ),
    (
        "out-misaligned",
        lambda: sk(L(1, 4, 4), out=misaligned(1, 4, 4, dtype=F32)),
        ValueError,
        r"aligned",
    ),
    ("out-is-x", lambda: (x := L(2, 4, 4), sk(x, out=x)), ValueError, r"out overlaps logits"),
    (
        "out-device",
        lambda: sk(L(2, 4, 4), out=meta(2, 4, 4, dtype=F32)),
        ValueError,
        r"out is on meta",
    ),
    (
        "out-with-grad",
        lambda: sk(L(2, 4, 4).requires_grad_(), out=L(2, 4, 4)),
        ValueError,
        r"out= is not allowed when logits requires grad",
    ),
    # backward
    ("b-g-none", lambda: skb(None, L(2, 4, 4)), TypeError, r"grad_out must be a torch\.Tensor"),
    ("b-x-none", lambda: skb(L(2, 4, 4), None), TypeError, r"logits must be a torch\.Tensor"),
    (
        "b-g-dtype",
        lambda: skb(t(2, 4, 4), L(2, 4, 4)),
        TypeError,
        r"grad_out has dtype torch\.bfloat16; it must be torch\.float32",
    ),
    (
        "b-g-shape",
        lambda: skb(L(3, 4, 4), L(2, 4, 4)),
        ValueError,
        r"logits must have shape \(3, 4, 4\) to match grad_out \(3, 4, 4\)",
    ),
    ("b-x-n32", lambda: skb(L(1, 32, 32), L(1, 32, 32)), ValueError, r"N <= 16"),
    ("b-rep-neg", lambda: skb(L(2, 4, 4), L(2, 4, 4), -2), ValueError, r"repeat must be in"),
    ("b-rep-zero", lambda: skb(L(2, 4, 4), L(2, 4, 4), 0), ValueError, r"repeat must be in \[1,"),
    ("b-eps-bool", lambda: skb(L(2, 4, 4), L(2, 4, 4), 3, True), TypeError, r"eps must be a real"),
    (
        "b-g-strided",
        lambda: skb(L(4, 4, 2).transpose(0, 2), L(2, 4, 4)),
        ValueError,
        r"grad_out is not contiguous",
    ),
    (
        "b-devices",
        lambda: skb(L(2, 4, 4), meta(2, 4, 4, dtype=F32)),
        ValueError,
        r"same CUDA device: grad_out is on cpu, logits on meta",
    ),
    (
        "b-out-is-g",
        lambda: (g := L(2, 4, 4), skb(g, L(2, 4, 4), out=g)),
        ValueError,
        r"out overlaps grad_out",
    ),
    (
        "b-out-shape",
        lambda: skb(L(2, 4, 4), L(2, 4, 4), out=L(2, 16)),
        ValueError,
        r"out has shape \(2, 16\)",
    ),
]


test_bad_input_raises_before_launch = refusals_test(BAD_CALLS)


@pytest.mark.parametrize(
    "call",
    [lambda: sk(L(2, 4, 4)), lambda: skb(L(2, 4, 4), L(2, 4, 4))],
    ids=["forward", "backward"],
)
def test_cpu_tensors_are_rejected(fake, call):
    with pytest.raises(ValueError, match=r"is on device 'cpu'; tileaot kernels run on CUDA"):
        call()
    assert fake.launches == []


@pytest.mark.parametrize("shape", [(7, 4, 4), (3, 5, 8, 8), (16, 16), (2, 1, 1), (9, 13, 13)])
def test_forward_launch_arguments(fake, cpu_as_cuda, shape):
    x = L(*shape)
    p = sk(x, 20, 1e-6)
    m, n = math.prod(shape[:-2]), shape[-1]
    assert (p.shape, p.dtype) == (x.shape, F32)
    assert fake.lookups == [("sinkhorn_normalize", "fp32")]
    assert fake.launches == [
        Launch(1001, 0, STREAM, (x.data_ptr(), p.data_ptr()), (m, n, n) * 2, (20, 1e-6))
    ]
    repeat, eps = fake.launches[0].scalars
    assert type(repeat) is int and type(eps) is float


@pytest.mark.parametrize("repeat", [1, 2, 65536, torch.tensor(3).numpy()[()]])
@pytest.mark.parametrize("eps", [0, 1e-6, 0.5])
def test_scalars_are_passed_as_int_and_float(fake, cpu_as_cuda, repeat, eps):
    sk(L(2, 4, 4), repeat, eps)
    assert fake.launches[0].scalars == (int(repeat), float(eps))
    assert [type(s) for s in fake.launches[0].scalars] == [int, float]


def test_backward_launch_arguments_and_out(fake, cpu_as_cuda):
    g, x, out = L(6, 8, 8), L(6, 8, 8), L(6, 8, 8)
    assert skb(g, x, 7, 1e-3, out=out) is out
    assert fake.lookups == [("sinkhorn_normalize_backward", "fp32")]
    assert fake.launches == [
        Launch(
            1001,
            0,
            STREAM,
            (g.data_ptr(), x.data_ptr(), out.data_ptr()),
            (6, 8, 8) * 3,
            (7, 1e-3),
        )
    ]


def test_forward_out(fake, cpu_as_cuda):
    x, out = L(3, 4, 4), L(3, 4, 4)
    assert sk(x, out=out) is out
    check_launch(fake.launches[0], "sinkhorn_normalize", logits=x, out=out)
    assert fake.launches[0].scalars == (10, 1e-6)  # the defaults


@pytest.mark.parametrize("shape", [(0, 4, 4), (3, 0, 0), (0, 0), (2, 0, 16, 16)])
def test_empty_inputs_return_without_launch(fake, cpu_as_cuda, shape):
    assert sk(L(*shape)).shape == shape
    assert skb(L(*shape), L(*shape)).shape == shape
    assert fake.launches == [] and fake.lookups == []


def test_autograd_launches_forward_then_backward_with_the_saved_logits(fake, cpu_as_cuda):
    x = L(5, 4, 4).requires_grad_()
    p = sk(x, 3, 1e-4)
    assert p.requires_grad and p.grad_fn is not None
    assert [launch.scalars for launch in fake.launches] == [(3, 1e-4)]
    p.backward(torch.ones(5, 4, 4))
    assert fake.lookups == [
        ("sinkhorn_normalize", "fp32"),
        ("sinkhorn_normalize_backward", "fp32"),
    ]
    fwd, bwd = fake.launches
    assert fwd.ptrs[0] == x.data_ptr() and bwd.ptrs[1] == x.data_ptr()
    assert bwd.shapes == (5, 4, 4) * 3 and bwd.scalars == (3, 1e-4)
    assert x.grad is not None and x.grad.shape == x.shape and bwd.ptrs[2] == x.grad.data_ptr()


def test_autograd_makes_a_strided_or_expanded_grad_contiguous(fake, cpu_as_cuda):
    x = L(3, 4, 4).requires_grad_()
    p = sk(x, 2, 0.0)
    p.sum().backward()  # the incoming gradient is an expanded (stride 0) tensor of ones
    bwd = fake.launches[1]
    assert bwd.shapes == (3, 4, 4) * 3 and bwd.ptrs[1] == x.data_ptr()


def test_no_grad_or_no_requires_grad_takes_the_plain_path(fake, cpu_as_cuda):
    x = L(2, 4, 4).requires_grad_()
    with torch.no_grad():
        assert sk(x).grad_fn is None
    assert sk(L(2, 4, 4)).grad_fn is None
    with torch.no_grad():
        sk(x, out=L(2, 4, 4))  # out= is fine when nothing is recorded
    assert len(fake.launches) == 3


def test_docstrings_name_everything():
    for fn in (sk, skb):
        for word in ("Args:", "Returns:", "Raises:", "Example:", "stream", "out:", "repeat"):
            assert word in fn.__doc__, (fn.__name__, word)
    assert "P = P / (P.sum(dim=-2, keepdim=True) + eps)" in sk.__doc__
