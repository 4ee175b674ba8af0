"""CPU tests of the per_block_cast_fp8 Python layer: validation before any launch, launch
arguments, empty inputs, `out=`, launches split past gridDim.y. No GPU and no native module
(see tests/_fakes.py)."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import STREAM, Launch, cpu_as_cuda, fake, meta, misaligned, refusals_test, t  # noqa: E402, F401
from _kernel_args import check_launch  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

F8, F32 = torch.float8_e4m3fn, torch.float32
_mod = importlib.import_module("tileaot.per_block_cast_fp8")
cast = _mod.per_block_cast_fp8


def pair(m: int, n: int, scale_shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    return t(m, n).to(F8), t(*scale_shape, dtype=F32)


def as_fp8(x: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """The first m * n bytes of x as a contiguous e4m3 [m, n] tensor."""
    return x.view(-1).view(torch.uint8)[: m * n].view(F8).view(m, n)


def overlapping(m: int, n: int, scale_shape: tuple[int, int]):
    buf = torch.zeros(m * n, dtype=torch.uint8)
    scale = buf[: scale_shape[0] * scale_shape[1] * 4].view(F32).view(scale_shape)
    return buf.view(F8).view(m, n), scale


# (id, call, exception, message regex): each call breaks exactly one rule.
BAD_CALLS = [
    ("x-list", lambda: cast([[1.0]]), TypeError, r"x must be a torch\.Tensor, got list"),
    (
        "x-int8",
        lambda: cast(t(4, 128, dtype=torch.int8)),
        TypeError,
        r"x has dtype torch\.int8; supported dtypes: torch\.bfloat16, torch\.float16, "
        r"torch\.float32",
    ),
    ("x-fp8", lambda: cast(t(4, 128).to(F8)), TypeError, r"x has dtype torch\.float8_e4m3fn"),
    ("x-1d", lambda: cast(t(128)), ValueError, r"x must have shape \[M, N\]; got shape \(128,\)"),
    ("x-3d", lambda: cast(t(2, 4, 128)), ValueError, r"x must have shape \[M, N\]"),
    ("x-strided", lambda: cast(t(256, 4).t()), ValueError, r"x is not contiguous"),
    ("x-misaligned", lambda: cast(misaligned(4, 128)), ValueError, r"x's data pointer .* 16-byte"),
    ("x-numel", lambda: cast(meta(2**24, 128)), ValueError, r"x has shape .* below 2\*\*31"),
    ("x-dim", lambda: cast(meta(2**31, 0)), ValueError, r"below 2\*\*31"),
    ("out-tensor", lambda: cast(t(4, 128), out=t(4, 128)), TypeError, r"out must be a \(q, sc"),
    ("out-len", lambda: cast(t(4, 128), out=(t(4, 128).to(F8),)), TypeError, r"\(q, scale\) tuple"),
    (
        "out-q-dtype",
        lambda: cast(t(4, 128), out=(t(4, 128), t(1, 1, dtype=F32))),
        TypeError,
        r"out\[0\] \(q\) has dtype torch\.bfloat16; this call writes torch\.float8_e4m3fn",
    ),
    (
        "out-q-shape",
        lambda: cast(t(4, 128), out=pair(128, 4, (1, 1))),
        ValueError,
        r"out\[0\] \(q\) has shape \(128, 4\); this call writes \(4, 128\)",
    ),
    (
        "out-scale-shape",
        lambda: cast(t(200, 300), out=pair(200, 300, (200, 3))),
        ValueError,
        r"out\[1\] \(scale\) has shape \(200, 3\); this call writes \(2, 3\)",
    ),
    (
        "out-scale-dtype",
        lambda: cast(t(4, 128), out=(t(4, 128).to(F8), t(1, 1))),
        TypeError,
        r"out\[1\] \(scale\) has dtype torch\.bfloat16; this call writes torch\.float32",
    ),
    (
        "out-scale-misaligned",
        lambda: cast(t(4, 128), out=(t(4, 128).to(F8), misaligned(1, 1, dtype=F32))),
        ValueError,
        r"out\[1\] \(scale\)'s data pointer",
    ),
    (
        "out-device",
        lambda: cast(t(4, 128), out=(meta(4, 128, dtype=F8), t(1, 1, dtype=F32))),
        ValueError,
        r"out\[0\] \(q\) is on meta, but the inputs are on CUDA device 0",
    ),
    (
        "out-overlap",
        lambda: cast(t(4, 256), out=overlapping(4, 256, (1, 2))),
        ValueError,
        r"out\[0\] \(q\) overlaps out\[1\] \(scale\)",
    ),
    (
        "out-q-in-x",
        lambda: (x := t(64, 128, dtype=F32), cast(x, out=(as_fp8(x, 64, 128), t(1, 1, dtype=F32)))),
        ValueError,
        r"out\[0\] \(q\) overlaps x",
    ),
    (
        "out-scale-in-x",
        lambda: (x := t(64, 128), cast(x, out=(t(64, 128).to(F8), x.view(F32)[:1, :1]))),
        ValueError,
        r"out\[1\] \(scale\) overlaps x",
    ),
]


test_bad_input_raises_before_launch = refusals_test(BAD_CALLS)


@pytest.mark.parametrize("bad", [0, None, "no"])
def test_round_sf_must_be_a_bool(fake, cpu_as_cuda, bad):
    with pytest.raises(TypeError, match="round_sf must be True or False; got "):
        cast(t(4, 128), round_sf=bad)
    assert fake.launches == []


def test_cpu_tensors_are_rejected(fake):
    with pytest.raises(ValueError, match=r"x is on device 'cpu'; tileaot kernels run on CUDA"):
        cast(t(4, 128))
    assert fake.launches == [] and fake.lookups == []


@pytest.mark.parametrize(
    ("dtype", "key"), [(torch.bfloat16, "bf16"), (torch.float16, "fp16"), (F32, "fp32")]
)
@pytest.mark.parametrize(("m", "n", "bm", "bn"), [(4, 128, 1, 1), (300, 7168, 3, 56), (1, 7, 1, 1)])
@pytest.mark.parametrize("round_sf", [None, False, True])
def test_launch_arguments(fake, cpu_as_cuda, dtype, key, m, n, bm, bn, round_sf):
    x = t(m, n, dtype=dtype)
    q, scale = cast(x) if round_sf is None else cast(x, round_sf=round_sf)
    assert (q.shape, q.dtype) == ((m, n), F8)
    assert (scale.shape, scale.dtype) == ((bm, bn), F32)
    assert q.is_contiguous() and scale.is_contiguous()
    assert fake.lookups == [("per_block_cast_fp8", key)]
    assert fake.launches == [
        Launch(
            1001,
            0,
            STREAM,
            (x.data_ptr(), q.data_ptr(), scale.data_ptr()),
            (m, n, m, n, bm, bn),
            (1.0 if round_sf else 0.0,),  # the kernel's round_sf (default False)
        )
    ]
    launch = fake.launches[0]
    assert all(type(v) is int for v in (launch.handle, *launch.ptrs, *launch.shapes))


def test_out(fake, cpu_as_cuda):
    x = t(130, 257)
    out = pair(130, 257, (2, 3))
    q, scale = cast(x, out=out)
    assert q is out[0] and scale is out[1]
    check_launch(fake.launches[0], "per_block_cast_fp8", x=x, q=out[0], scale=out[1])
    q, scale = cast(x, out=list(out))  # a list is fine too
    assert q is out[0]


@pytest.mark.parametrize(
    ("m", "n", "scale_shape"), [(0, 256, (0, 2)), (3, 0, (1, 0)), (0, 0, (0, 0))]
)
def test_empty_inputs_return_without_launch(fake, cpu_as_cuda, m, n, scale_shape):
    q, scale = cast(t(m, n))
    assert q.shape == (m, n) and scale.shape == scale_shape
    assert fake.launches == [] and fake.lookups == []


def test_tall_inputs_are_split_into_launches_of_65535_row_blocks(fake, cpu_as_cuda):
    rows = 65535 * 128
    m, n = rows + 200, 2  # 65537 row blocks: more than gridDim.y takes
    x = meta(m, n)  # no memory: pointers are 0-based, which is all the fake looks at
    q, scale = cast(x)
    assert scale.shape == (65537, 1)
    assert [launch.shapes for launch in fake.launches] == [
        (rows, n, rows, n, 65535, 1),
        (200, n, 200, n, 2, 1),
    ]
    first, second = (launch.ptrs for launch in fake.launches)
    assert first == (x.data_ptr(), q.data_ptr(), scale.data_ptr())
    assert second == (
        x.data_ptr() + rows * n * 2,
        q.data_ptr() + rows * n,
        scale.data_ptr() + 65535 * 1 * 4,
    )
    assert fake.lookups == [("per_block_cast_fp8", "bf16")]
    assert fake.launches[0].device == 1  # meta counts as device 1 here


def test_docstring_and_example_shapes():
    doc = cast.__doc__
    for section in ("Args:", "Returns:", "Raises:", "current stream", "Example:", ">>> "):
        assert section in doc, section
    call, shapes = _mod.example_shapes("bf16")
    assert call == "x[4096, 7168]" and shapes == (4096, 7168, 4096, 7168, 32, 56)
