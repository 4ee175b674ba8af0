"""CPU tests of the FP4 Python layer (per_token_cast_fp4 and the FP4 half of cast_back): every
bad-input class raises before any lookup or launch, launch arguments, `out=`, empty inputs,
docstrings. No GPU and no native module (tests/_fakes.py).

Until the package's __init__ imports the ops, run with ``PYTHONPATH=python`` (an installed
wheel without them would shadow the source tree).
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import (  # noqa: E402, F401 (fixtures imported by name)
    STREAM,
    Launch,
    cpu_as_cuda,
    fake,
    meta,
    misaligned,
    out_refusals,
    refusals_test,
    t,
)
from _kernel_args import check_launch  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

CAST = importlib.import_module("tileaot.per_token_cast_fp4").SCHEMA
BACK = importlib.import_module("tileaot._cast_back_fp4").SCHEMA
cast = importlib.import_module("tileaot.per_token_cast_fp4").per_token_cast_fp4
_back = importlib.import_module("tileaot._cast_back_fp4").cast_back_fp4
U8, E4M3, BF16, F32 = torch.uint8, torch.float8_e4m3fn, torch.bfloat16, torch.float32


def back(q, scale, group_size=32, out_dtype=BF16, out=None):
    return _back(q, scale, group_size=group_size, out_dtype=out_dtype, out=out)


def codes(*shape: int) -> torch.Tensor:
    return torch.randint(0, 256, shape, dtype=U8)


def exps(*shape: int) -> torch.Tensor:
    return torch.randint(100, 140, shape, dtype=U8)


def cast_outs(m: int, n: int, g: int = 32, sdt: torch.dtype = U8):
    return torch.zeros(m, n // 2, dtype=U8), torch.zeros(m, n // g, dtype=sdt)


def overlapping(m: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    buf = torch.zeros(m * n // 2, dtype=U8)
    return buf.view(m, n // 2), buf[: m * n // 32].view(m, n // 32)


# (id, call, exception, message regex): each call breaks exactly one rule.
BAD_CALLS = [
    # per_token_cast_fp4
    ("x-list", lambda: cast([[1.0]]), TypeError, r"x must be a torch\.Tensor, got list"),
    ("x-int", lambda: cast(t(4, 64, dtype=torch.int32)), TypeError, r"x has dtype torch\.int32"),
    ("x-fp8", lambda: cast(t(4, 64).to(E4M3)), TypeError, r"supported dtypes: torch\.bfloat16"),
    ("x-0d", lambda: cast(t()), ValueError, r"0-d"),
    ("g-float", lambda: cast(t(4, 64), 32.0), TypeError, r"group_size must be an int, got float"),
    ("g-bool", lambda: cast(t(4, 64), True), TypeError, r"group_size must be an int, got bool"),
    ("g-none", lambda: cast(t(4, 64), None), TypeError, r"group_size must be an int, got None"),
    ("g-64", lambda: cast(t(4, 64), 64), ValueError, r"group_size must be 16 or 32; got 64"),
    ("g-8", lambda: cast(t(4, 64), 8), ValueError, r"group_size must be 16 or 32; got 8"),
    ("fmt-int", lambda: cast(t(4, 64), 32, 0), TypeError, r"scale_format must be a str, got int"),
    ("fmt-dtype", lambda: cast(t(4, 64), 32, E4M3), TypeError, r"scale_format must be a str"),
    ("fmt-mx", lambda: cast(t(4, 64), 32, "mxfp4"), ValueError, r"'ue8m0' or 'e4m3'; got 'mxfp4'"),
    ("n-48", lambda: cast(t(4, 48), 32), ValueError, r"group_size=32 must divide.*N = 48"),
    ("n-8", lambda: cast(t(4, 8), 16), ValueError, r"group_size=16 must divide.*N = 8"),
    ("x-strided", lambda: cast(t(64, 4).t()), ValueError, r"x is not contiguous"),
    ("x-misaligned", lambda: cast(misaligned(4, 64)), ValueError, r"x's data pointer .* 16-byte"),
    ("x-cpu", lambda: cast(t(4, 64)), ValueError, r"x is on device 'cpu'.*CUDA devices only"),
    ("x-int32", lambda: cast(meta(2**16, 2**15)), ValueError, r"below 2\*\*31: split the call"),
    ("out-tensor", lambda: cast(t(4, 64), out=codes(4, 32)), TypeError, r"out must be a \(q, s"),
    ("out-triple", lambda: cast(t(4, 64), out=(1, 2, 3)), TypeError, r"out must be a \(q, scale"),
    (
        "out-scale-dtype-e4m3",
        lambda: cast(t(4, 64), 32, "e4m3", out=(codes(4, 32), exps(4, 2))),
        TypeError,
        r"out\[1\] \(scale\) has dtype torch\.uint8; this call writes torch\.float8_e4m3fn",
    ),
    (
        "out-scale-dtype-ue8m0",
        lambda: cast(t(4, 64), out=(codes(4, 32), exps(4, 2).view(E4M3))),
        TypeError,
        r"out\[1\] \(scale\) has dtype torch\.float8_e4m3fn; this call writes torch\.uint8",
    ),
    (
        "out-scale-shape-g16",
        lambda: cast(t(4, 64), 16, out=(codes(4, 32), exps(4, 2))),
        ValueError,
        r"out\[1\] \(scale\) has shape \(4, 2\); this call writes \(4, 4\)",
    ),
    ("out-overlap", lambda: cast(t(4, 64), out=overlapping(4, 64)), ValueError, r"overlaps"),
    (
        "out-in-x",
        lambda: (x := t(4, 64), cast(x, out=(x.view(U8).view(-1)[:128].view(4, 32), exps(4, 2)))),
        ValueError,
        r"out\[0\] \(q\) overlaps x",
    ),
    # cast_back_fp4
    ("q-list", lambda: back([[1]], exps(1, 1)), TypeError, r"q must be a torch\.Tensor"),
    ("q-int8", lambda: back(codes(4, 16).to(torch.int8), exps(4, 1)), TypeError, r"q has dtype"),
    ("q-0d", lambda: back(codes(), exps(1)), ValueError, r"q must have shape .* 0-d"),
    ("s-none", lambda: back(codes(4, 16), None), TypeError, r"scale must be a torch\.Tensor"),
    ("s-fp32", lambda: back(codes(4, 16), t(4, 1, dtype=F32)), TypeError, r"scale has dtype"),
    ("s-shape", lambda: back(codes(4, 32), exps(4, 1)), ValueError, r"scale must have shape"),
    ("s-rows", lambda: back(codes(4, 16), exps(2, 1)), ValueError, r"scale must have shape \(4,"),
    ("bg-float", lambda: back(codes(4, 16), exps(4, 1), 32.0), TypeError, r"group_size must be"),
    ("bg-24", lambda: back(codes(4, 24), exps(4, 2), 24), ValueError, r"must be 16 or 32"),
    ("bg-div", lambda: back(codes(4, 8), exps(4, 1), 32), ValueError, r"must divide N = 2"),
    ("od-fp16", lambda: back(codes(4, 16), exps(4, 1), 32, torch.float16), TypeError, r"out_dt"),
    ("od-str", lambda: back(codes(4, 16), exps(4, 1), 32, "bf16"), TypeError, r"out_dtype must"),
    ("q-strided", lambda: back(codes(32, 4).t(), exps(4, 4), 16), ValueError, r"q is not contig"),
    (
        "q-misaligned",
        lambda: back(misaligned(4, 16, dtype=U8), exps(4, 1)),
        ValueError,
        r"q's data pointer",
    ),
    (
        "s-misaligned",
        lambda: back(codes(4, 16), misaligned(4, 1, dtype=U8)),
        ValueError,
        r"scale's data pointer",
    ),
    ("q-cpu", lambda: back(codes(4, 16), exps(4, 1)), ValueError, r"q is on device 'cpu'"),
    (
        "s-device",
        lambda: back(codes(4, 16), meta(4, 1, dtype=U8)),
        ValueError,
        r"same CUDA device: q is on cpu, scale on meta",
    ),
    (
        "x-int32",  # q fits int32, the output (twice the elements) does not
        lambda: back(meta(2**16, 2**14, dtype=U8), meta(2**16, 2**10, dtype=U8)),
        ValueError,
        r"out \(the output\) has shape \(65536, 32768\).*below 2\*\*31",
    ),
    (
        "bout-overlap",
        lambda: (
            buf := torch.zeros(4 * 32, dtype=BF16),
            back(buf.view(U8)[:64].view(4, 16), exps(4, 1), out=buf.view(4, 32)),
        ),
        ValueError,
        r"out overlaps q",
    ),
]

# The out= rules of each schema (dtype, shape, device, layout) for every output, by its name.
BAD_CALLS += out_refusals(
    CAST, lambda out: cast(t(4, 64), 16, "e4m3", out=out), cast_outs(4, 64, 16, E4M3)
)
BAD_CALLS += out_refusals(
    BACK,
    lambda out: back(codes(4, 16), exps(4, 1), out=out),
    torch.zeros(4, 32, dtype=BF16),
    "bout",
)

test_bad_calls_raise_before_any_launch = refusals_test(BAD_CALLS, on_cpu={"x-cpu", "q-cpu"})


@pytest.mark.parametrize(
    ("dtype", "key_dtype"), [(BF16, "bf16"), (torch.float16, "fp16"), (F32, "fp32")]
)
@pytest.mark.parametrize(("g", "fmt"), [(32, "ue8m0"), (16, "e4m3"), (16, "ue8m0"), (32, "e4m3")])
def test_cast_launch_arguments(fake, cpu_as_cuda, dtype, key_dtype, g, fmt):
    x = t(6, 128, dtype=dtype)
    q, scale = cast(x, g, fmt)
    assert (q.shape, q.dtype) == ((6, 64), U8)
    assert (scale.shape, scale.dtype) == ((6, 128 // g), U8 if fmt == "ue8m0" else E4M3)
    assert fake.lookups == [("per_token_cast_fp4", f"{key_dtype},g{g},{fmt}")]
    assert fake.launches == [
        Launch(
            1001,
            0,
            STREAM,
            (x.data_ptr(), q.data_ptr(), scale.data_ptr()),
            (6, 128, 6, 64, 6, 128 // g),
            (),
        )
    ]


def test_cast_defaults_leading_dims_and_out(fake, cpu_as_cuda):
    x = t(2, 3, 64)
    q, scale = cast(x)  # group_size=32, "ue8m0"
    assert q.shape == (2, 3, 32) and scale.shape == (2, 3, 2) and scale.dtype == U8
    assert fake.launches[0].shapes == (6, 64, 6, 32, 6, 2)
    out = cast_outs(6, 64, 16, E4M3)
    q2, s2 = cast(x.view(6, 64), 16, "e4m3", out=out)
    assert q2 is out[0] and s2 is out[1]
    check_launch(fake.launches[1], "per_token_cast_fp4", x=x.view(6, 64), q=out[0], scale=out[1])
    assert fake.lookups == [
        ("per_token_cast_fp4", "bf16,g32,ue8m0"),
        ("per_token_cast_fp4", "bf16,g16,e4m3"),
    ]


@pytest.mark.parametrize(
    ("scale_dtype", "fmt", "out_dtype", "key_dtype"),
    [(U8, "ue8m0", BF16, "bf16"), (E4M3, "e4m3", F32, "fp32"), (U8, "ue8m0", None, "bf16")],
)
@pytest.mark.parametrize("g", [16, 32])
def test_cast_back_launch_arguments(fake, cpu_as_cuda, scale_dtype, fmt, out_dtype, key_dtype, g):
    q = codes(5, 64)
    scale = exps(5, 128 // g).view(scale_dtype)
    x = back(q, scale, g, out_dtype)
    assert (x.shape, x.dtype) == ((5, 128), out_dtype or BF16)
    assert fake.lookups == [("cast_back_fp4", f"{key_dtype},g{g},{fmt}")]
    assert fake.launches == [
        Launch(
            1001,
            0,
            STREAM,
            (q.data_ptr(), scale.data_ptr(), x.data_ptr()),
            (5, 64, 5, 128 // g, 5, 128),
            (),
        )
    ]


def test_cast_back_out_and_leading_dims(fake, cpu_as_cuda):
    q, scale = codes(2, 3, 16), exps(2, 3, 1)
    out = torch.zeros(2, 3, 32, dtype=F32)
    assert back(q, scale, 32, None, out) is out  # out_dtype None: taken from out
    assert back(q, scale, 32, F32, out) is out
    assert [launch.shapes for launch in fake.launches] == [(6, 16, 6, 1, 6, 32)] * 2
    assert fake.lookups == [("cast_back_fp4", "fp32,g32,ue8m0")]  # handle looked up once


@pytest.mark.parametrize(
    ("call", "shapes"),
    [
        (lambda: cast(t(0, 64)), [(0, 32), (0, 2)]),
        (lambda: cast(t(3, 0), 16, "e4m3"), [(3, 0), (3, 0)]),
        (lambda: cast(t(2, 0, 64)), [(2, 0, 32), (2, 0, 2)]),
        (lambda: [back(codes(0, 16), exps(0, 1))], [(0, 32)]),
        (lambda: [back(codes(4, 0), exps(4, 0), 16, F32)], [(4, 0)]),
    ],
    ids=["cast-m0", "cast-n0", "cast-3d-m0", "back-m0", "back-n0"],
)
def test_empty_inputs_return_without_launch(fake, cpu_as_cuda, call, shapes):
    assert [tuple(r.shape) for r in call()] == shapes
    assert fake.lookups == [] and fake.launches == []


def test_docstrings():
    for op in (cast, _back):
        for section in ("Args:", "Returns:", "Raises:", "current stream", "Example:", ">>> "):
            assert section in op.__doc__, (op.__name__, section)
