"""CPU tests of the transpose Python layer: validation before any launch, launch arguments
(dtype -> kernel width, batch chunking), empty inputs, `out=`. No GPU and no native module
(see tests/_fakes.py)."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import STREAM, Launch, cpu_as_cuda, fake, meta, misaligned, refusals_test, t, tileaot  # noqa: E402, F401
from _kernel_args import check_launch  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

transpose = importlib.import_module("tileaot.transpose").transpose
BF16 = torch.bfloat16


# (id, call, exception, message regex): each call breaks exactly one rule.
BAD_CALLS = [
    ("x-list", lambda: transpose([[1.0]]), TypeError, r"x must be a torch\.Tensor, got list"),
    (
        "x-int64",
        lambda: transpose(t(4, 8, dtype=torch.int64)),
        TypeError,
        r"x has dtype torch\.int64; supported dtypes: torch\.float8_e4m3fn, .*torch\.int32$",
    ),
    ("x-fp64", lambda: transpose(t(4, 8, dtype=torch.float64)), TypeError, r"torch\.float64"),
    ("x-1d", lambda: transpose(t(8)), ValueError, r"x must have shape \(\.\.\., R, C\)"),
    ("x-0d", lambda: transpose(t()), ValueError, r"\(\.\.\., R, C\); got a 0-d tensor"),
    ("x-strided", lambda: transpose(t(8, 4).t()), ValueError, r"x is not contiguous"),
    ("x-misaligned", lambda: transpose(misaligned(4, 8)), ValueError, r"16-byte aligned"),
    ("x-int32-size", lambda: transpose(meta(2**16, 2**15)), ValueError, r"below 2\*\*31"),
    ("x-dim-int32", lambda: transpose(meta(2**31, 0)), ValueError, r"below 2\*\*31"),
    ("out-list", lambda: transpose(t(4, 8), out=[0]), TypeError, r"out must be a torch\.Tensor"),
    (
        "out-dtype",
        lambda: transpose(t(4, 8), out=t(8, 4, dtype=torch.float16)),
        TypeError,
        r"out has dtype torch\.float16; this call writes torch\.bfloat16",
    ),
    (
        "out-shape",
        lambda: transpose(t(4, 8), out=t(4, 8)),
        ValueError,
        r"out has shape \(4, 8\); this call writes \(8, 4\)",
    ),
    (
        "out-shape-3d",
        lambda: transpose(t(2, 4, 8), out=t(8, 4)),
        ValueError,
        r"this call writes \(2, 8, 4\)",
    ),
    ("out-strided", lambda: transpose(t(4, 8), out=t(4, 8).t()), ValueError, r"not contiguous"),
    ("out-misaligned", lambda: transpose(t(4, 8), out=misaligned(8, 4)), ValueError, r"aligned"),
    ("out-device", lambda: transpose(t(4, 8), out=meta(8, 4)), ValueError, r"out is on meta"),
    ("out-is-x", lambda: (x := t(4, 4), transpose(x, out=x)), ValueError, r"out overlaps x"),
    (
        "out-in-x",
        lambda: (x := t(8, 8), transpose(x[:4], out=x[2:6].view(8, 4))),
        ValueError,
        r"out overlaps x",
    ),
]


test_bad_input_raises_before_launch = refusals_test(BAD_CALLS)


def test_cpu_tensors_are_rejected(fake):
    with pytest.raises(ValueError, match=r"is on device 'cpu'; tileaot kernels run on CUDA"):
        transpose(t(4, 8))
    assert fake.launches == []


@pytest.mark.parametrize(
    ("dtype", "key"),
    [
        (torch.float8_e4m3fn, "e4m3"),
        (torch.float8_e5m2, "e4m3"),
        (torch.uint8, "e4m3"),
        (torch.int8, "e4m3"),
        (torch.bool, "e4m3"),
        (torch.bfloat16, "bf16"),
        (torch.int16, "bf16"),
        (torch.float16, "fp16"),
        (torch.float32, "fp32"),
        (torch.int32, "fp32"),
    ],
)
def test_each_dtype_goes_to_the_kernel_of_its_width(fake, cpu_as_cuda, dtype, key):
    x = torch.zeros(5, 7).to(dtype)
    y = transpose(x)
    assert (y.shape, y.dtype) == ((7, 5), dtype)
    assert fake.lookups == [("transpose", key)]
    assert fake.launches == [
        Launch(1001, 0, STREAM, (x.data_ptr(), y.data_ptr()), (1, 5, 7, 1, 7, 5), ())
    ]


def test_leading_dims_are_one_batch(fake, cpu_as_cuda):
    x = t(2, 3, 4, 6)
    y = transpose(x)
    assert y.shape == (2, 3, 6, 4)
    assert fake.launches[0].shapes == (6, 4, 6, 6, 6, 4)
    launch = fake.launches[0]
    assert all(type(v) is int for v in (launch.handle, *launch.ptrs, *launch.shapes))


def test_out(fake, cpu_as_cuda):
    x, out = t(3, 5, dtype=torch.float32), t(5, 3, dtype=torch.float32)
    assert transpose(x, out=out) is out
    check_launch(fake.launches[0], "transpose", x=x.view(1, 3, 5), y=out.view(1, 5, 3))


def test_batches_past_grid_z_are_split_at_aligned_offsets(fake, cpu_as_cuda):
    x = meta(65520 + 70, 3, 5, dtype=torch.float16)  # 65590 matrices of 3 x 5
    y = transpose(x)
    assert y.shape == (65590, 5, 3)
    step = 65520 * 15 * 2  # bytes of one chunk: a multiple of 16
    assert step % 16 == 0
    assert [launch.shapes for launch in fake.launches] == [
        (65520, 3, 5, 65520, 5, 3),
        (70, 3, 5, 70, 5, 3),
    ]
    assert [launch.ptrs for launch in fake.launches] == [
        (x.data_ptr(), y.data_ptr()),
        (x.data_ptr() + step, y.data_ptr() + step),
    ]
    assert fake.lookups == [("transpose", "fp16")]  # looked up once


@pytest.mark.parametrize("shape", [(0, 8), (8, 0), (0, 0), (3, 0, 5), (0, 4, 4)])
def test_empty_inputs_return_without_launch(fake, cpu_as_cuda, shape):
    x = t(*shape)
    y = transpose(x)
    assert y.shape == (*shape[:-2], shape[-1], shape[-2])
    assert fake.launches == [] and fake.lookups == []


def test_docstring_names_everything():
    doc = transpose.__doc__
    for word in ("Args:", "Returns:", "Raises:", "Example:", "stream", "out:", "bit-exact"):
        assert word in doc
