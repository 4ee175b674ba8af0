"""CPU tests of the topk_gate Python layer: every bad-input class raises before any lookup or
launch, launch arguments, `out=`, empty inputs. No GPU and no native module (tests/_fakes.py).

Until the package's __init__ imports the op, run with ``PYTHONPATH=python`` (an installed
wheel without it would shadow the source tree).
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import STREAM, Launch, cpu_as_cuda, fake, meta, misaligned, refusals_test, t  # noqa: E402, F401
from _kernel_args import check_launch  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

topk_gate = importlib.import_module("tileaot.topk_gate").topk_gate
F32, I32 = torch.float32, torch.int32


def s(*shape: int) -> torch.Tensor:
    return t(*shape, dtype=F32)


def outs(tokens: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(tokens, k, dtype=I32), torch.zeros(tokens, k)


def overlapping(tokens: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    buf = torch.zeros(tokens * k, dtype=I32)
    return buf.view(tokens, k), buf.view(F32).view(tokens, k)


# (id, call, exception, message regex): each call breaks exactly one rule.
BAD_CALLS = [
    ("scores-list", lambda: topk_gate([[1.0]], 1), TypeError, r"scores must be a torch\.Tensor"),
    (
        "scores-bf16",
        lambda: topk_gate(t(4, 64), 2),
        TypeError,
        r"scores has dtype torch\.bfloat16; it must be torch\.float32$",
    ),
    (
        "scores-1d",
        lambda: topk_gate(s(64), 2),
        ValueError,
        r"scores must have shape \[T, E\]; got shape \(64,\)",
    ),
    ("scores-3d", lambda: topk_gate(s(2, 4, 64), 2), ValueError, r"got shape \(2, 4, 64\)"),
    ("k-float", lambda: topk_gate(s(4, 64), 2.0), TypeError, r"k must be an int, got float"),
    ("k-bool", lambda: topk_gate(s(4, 64), True), TypeError, r"k must be an int, got bool"),
    ("k-none", lambda: topk_gate(s(4, 64), None), TypeError, r"k must be an int, got NoneType"),
    ("k-0", lambda: topk_gate(s(4, 64), 0), ValueError, r"k must be in \[1, 32\].*got 0"),
    ("k-33", lambda: topk_gate(s(4, 64), 33), ValueError, r"k must be in \[1, 32\].*got 33"),
    ("k-above-e", lambda: topk_gate(s(4, 6), 7), ValueError, r"k must be in \[1, 6\].*E = 6"),
    ("scoring-int", lambda: topk_gate(s(4, 64), 2, 1), TypeError, r"scoring must be a str"),
    (
        "scoring-unknown",
        lambda: topk_gate(s(4, 64), 2, "Softmax"),
        ValueError,
        r"scoring must be 'softmax' or 'sigmoid'; got 'Softmax'",
    ),
    ("renorm-int", lambda: topk_gate(s(4, 64), 2, renormalize=1), TypeError, r"must be a bool"),
    ("e-0", lambda: topk_gate(s(4, 0), 1), ValueError, r"E = 0 experts; .* 1 <= E <= 512"),
    ("e-513", lambda: topk_gate(s(4, 513), 1), ValueError, r"E = 513 experts"),
    ("strided", lambda: topk_gate(s(64, 4).t(), 2), ValueError, r"scores is not contiguous"),
    (
        "misaligned",
        lambda: topk_gate(misaligned(4, 64, dtype=F32), 2),
        ValueError,
        r"scores's data pointer 0x[0-9a-f]+ is not 16-byte aligned",
    ),
    (
        "numel-int32",
        lambda: topk_gate(meta(2**23, 256, dtype=F32), 8),
        ValueError,
        r"below 2\*\*31",
    ),
    ("out-tensor", lambda: topk_gate(s(4, 64), 2, out=s(4, 2)), TypeError, r"\(idx, weights\)"),
    (
        "out-len",
        lambda: topk_gate(s(4, 64), 2, out=outs(4, 2)[:1]),
        TypeError,
        r"out must be a \(idx, weights\) tuple of tensors; got a tuple of 1",
    ),
    (
        "out-idx-dtype",
        lambda: topk_gate(s(4, 64), 2, out=(torch.zeros(4, 2, dtype=torch.int64), s(4, 2))),
        TypeError,
        r"out\[0\] \(idx\) has dtype torch\.int64; this call writes torch\.int32",
    ),
    (
        "out-weights-dtype",
        lambda: topk_gate(s(4, 64), 2, out=(outs(4, 2)[0], t(4, 2))),
        TypeError,
        r"out\[1\] \(weights\) has dtype torch\.bfloat16; this call writes torch\.float32",
    ),
    (
        "out-idx-shape",
        lambda: topk_gate(s(4, 64), 2, out=outs(4, 3)),
        ValueError,
        r"out\[0\] \(idx\) has shape \(4, 3\); this call writes \(4, 2\)",
    ),
    (
        "out-weights-strided",
        lambda: topk_gate(s(4, 64), 2, out=(outs(4, 2)[0], s(2, 4).t())),
        ValueError,
        r"out\[1\] \(weights\) is not contiguous",
    ),
    (
        "out-misaligned",
        lambda: topk_gate(s(4, 64), 2, out=(misaligned(4, 2, dtype=I32), s(4, 2))),
        ValueError,
        r"out\[0\] \(idx\)'s data pointer",
    ),
    (
        "out-device",
        lambda: topk_gate(s(4, 64), 2, out=(meta(4, 2, dtype=I32), s(4, 2))),
        ValueError,
        r"out\[0\] \(idx\) is on meta, but the inputs are on CUDA device 0",
    ),
    (
        "out-overlap",
        lambda: topk_gate(s(4, 64), 2, out=overlapping(4, 2)),
        ValueError,
        r"out\[0\] \(idx\) overlaps out\[1\] \(weights\)",
    ),
    (
        "out-in-scores",
        lambda: (x := s(4, 64), topk_gate(x, 2, out=(x[0, :8].view(I32).view(4, 2), s(4, 2)))),
        ValueError,
        r"out\[0\] \(idx\) overlaps scores",
    ),
]


test_bad_input_raises_before_launch = refusals_test(BAD_CALLS)


@pytest.mark.parametrize("tokens", [4, 0])
def test_cpu_tensors_are_rejected(fake, tokens):
    with pytest.raises(ValueError, match=r"is on device 'cpu'; tileaot kernels run on CUDA"):
        topk_gate(s(tokens, 64), 2)
    assert fake.launches == [] and fake.lookups == []


@pytest.mark.parametrize(
    ("scoring", "renormalize", "key", "flag"),
    [
        ("softmax", True, "fp32,softmax", 1.0),
        ("softmax", False, "fp32,softmax", 0.0),
        ("sigmoid", True, "fp32,sigmoid", 1.0),
        ("sigmoid", False, "fp32,sigmoid", 0.0),
    ],
)
def test_launch_arguments(fake, cpu_as_cuda, scoring, renormalize, key, flag):
    x = s(37, 100)
    idx, w = topk_gate(x, 6, scoring, renormalize)
    assert (idx.shape, idx.dtype, w.shape, w.dtype) == ((37, 6), I32, (37, 6), F32)
    assert fake.lookups == [("topk_gate", key)]
    assert fake.launches == [
        Launch(
            1001,
            0,
            STREAM,
            (x.data_ptr(), idx.data_ptr(), w.data_ptr()),
            (37, 100, 37, 6, 37, 6),
            (flag,),
        )
    ]
    launch = fake.launches[0]
    assert all(type(v) is int for v in (launch.handle, *launch.ptrs, *launch.shapes))
    assert type(launch.scalars[0]) is float


@pytest.mark.parametrize("k", [1, 16, 32, torch.tensor(8).numpy()[()]])
def test_k_bounds_and_numpy_ints(fake, cpu_as_cuda, k):
    idx, _ = topk_gate(s(3, 256), k)
    assert idx.shape == (3, int(k))
    assert fake.launches[0].shapes == (3, 256, 3, int(k), 3, int(k))
    assert all(type(v) is int for v in fake.launches[0].shapes)


def test_out(fake, cpu_as_cuda):
    x, out = s(5, 64), outs(5, 8)
    idx, w = topk_gate(x, 8, out=out)
    assert idx is out[0] and w is out[1]
    check_launch(fake.launches[0], "topk_gate", scores=x, idx=out[0], weights=out[1])


def test_out_as_list(fake, cpu_as_cuda):
    out = list(outs(2, 1))
    assert topk_gate(s(2, 8), 1, out=out) == tuple(out)


def test_empty_tokens_return_without_launch(fake, cpu_as_cuda):
    idx, w = topk_gate(s(0, 256), 8)
    assert idx.shape == w.shape == (0, 8)
    out = outs(0, 4)
    assert topk_gate(s(0, 64), 4, "sigmoid", out=out) == out
    assert fake.launches == [] and fake.lookups == []


def test_empty_tokens_are_still_validated(fake, cpu_as_cuda):
    with pytest.raises(ValueError, match=r"k must be in"):
        topk_gate(s(0, 8), 9)
    with pytest.raises(TypeError, match=r"out\[1\] \(weights\) has dtype"):
        topk_gate(s(0, 8), 2, out=(torch.zeros(0, 2, dtype=I32), t(0, 2)))


def test_handle_is_looked_up_once_per_scoring(fake, cpu_as_cuda):
    for scoring in ("softmax", "sigmoid", "softmax", "sigmoid"):
        topk_gate(s(2, 64), 2, scoring)
    assert fake.lookups == [("topk_gate", "fp32,softmax"), ("topk_gate", "fp32,sigmoid")]
    assert [launch.handle for launch in fake.launches] == [1001, 1002, 1001, 1002]


def test_docstring_names_every_rule():
    doc = topk_gate.__doc__
    for word in ("Args:", "Returns:", "Raises:", "Example:", "stream", "smaller first", "NaN"):
        assert word in doc
