"""CPU tests of the swiglu / swiglu_per_token_cast_fp8 Python layer: validation before any
launch, launch arguments, empty inputs, `out=`. No GPU and no native module (tests/_fakes.py)."""

from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")

from _fakes import STREAM, Launch, cpu_as_cuda, fake, meta, misaligned, refusals_test, t, tileaot  # noqa: E402, F401
from _kernel_args import check_launch  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

F8, F32, BF16, F16 = torch.float8_e4m3fn, torch.float32, torch.bfloat16, torch.float16
# From the modules: the package exports them once python/tileaot/__init__.py imports them.
swiglu = importlib.import_module("tileaot.swiglu").swiglu
fused = importlib.import_module("tileaot.swiglu_per_token_cast_fp8").swiglu_per_token_cast_fp8


def fp8_out(m: int, h: int) -> tuple[torch.Tensor, torch.Tensor]:
    return t(m, h).to(F8), t(m, h // 128, dtype=F32)


def overlapping_out(m: int, h: int) -> tuple[torch.Tensor, torch.Tensor]:
    buf = torch.zeros(m * h, dtype=torch.uint8)
    return buf.view(F8).view(m, h), buf[: m * (h // 128) * 4].view(F32).view(m, h // 128)


# (id, call, exception, message regex): each call breaks exactly one rule.
BAD_CALLS = [
    # swiglu
    ("sw-x-list", lambda: swiglu([[1.0, 2.0]]), TypeError, r"x must be a torch\.Tensor, got list"),
    (
        "sw-x-int32",
        lambda: swiglu(t(4, 64, dtype=torch.int32)),
        TypeError,
        r"x has dtype torch\.int32; supported dtypes: torch\.bfloat16, torch\.float16, "
        r"torch\.float32",
    ),
    ("sw-x-fp8", lambda: swiglu(t(4, 64).to(F8)), TypeError, r"x has dtype torch\.float8"),
    ("sw-x-0d", lambda: swiglu(t()), ValueError, r"0-d"),
    (
        "sw-x-odd",
        lambda: swiglu(t(4, 63)),
        ValueError,
        r"x must have shape \(\.\.\., 2\*H\): its dim -1 is 63, not a multiple of 2",
    ),
    ("sw-x-strided", lambda: swiglu(t(64, 4).t()), ValueError, r"x is not contiguous"),
    (
        "sw-x-misaligned",
        lambda: swiglu(misaligned(4, 64)),
        ValueError,
        r"x's data pointer 0x[0-9a-f]+ is not 16-byte aligned",
    ),
    (
        "sw-x-int32-numel",
        lambda: swiglu(meta(2**21, 1024)),
        ValueError,
        r"x has shape \(2097152, 1024\) \(2147483648 elements\).*below 2\*\*31",
    ),
    ("sw-out-list", lambda: swiglu(t(4, 64), out=[0]), TypeError, r"out must be a torch"),
    (
        "sw-out-dtype",
        lambda: swiglu(t(4, 64), out=t(4, 32, dtype=F16)),
        TypeError,
        r"out has dtype torch\.float16; this call writes torch\.bfloat16",
    ),
    (
        "sw-out-shape",
        lambda: swiglu(t(4, 64), out=t(4, 64)),
        ValueError,
        r"out has shape \(4, 64\); this call writes \(4, 32\)",
    ),
    (
        "sw-out-shape-3d",
        lambda: swiglu(t(2, 3, 64), out=t(6, 32)),
        ValueError,
        r"out has shape \(6, 32\); this call writes \(2, 3, 32\)",
    ),
    ("sw-out-strided", lambda: swiglu(t(4, 64), out=t(32, 4).t()), ValueError, r"not contiguous"),
    (
        "sw-out-misaligned",
        lambda: swiglu(t(4, 64), out=misaligned(4, 32)),
        ValueError,
        r"out's data pointer",
    ),
    (
        "sw-out-in-x",
        lambda: (x := t(4, 64), swiglu(x, out=x[2:].view(4, 32))),
        ValueError,
        r"out overlaps x",
    ),
    (
        "sw-out-device",
        lambda: swiglu(t(4, 64), out=meta(4, 32)),
        ValueError,
        r"out is on meta, but the inputs are on CUDA device 0",
    ),
    # swiglu_per_token_cast_fp8: types and dtypes
    ("fq-x-tuple", lambda: fused((1, 2)), TypeError, r"x must be a torch\.Tensor, got tuple"),
    (
        "fq-x-fp16",
        lambda: fused(t(4, 256, dtype=F16)),
        TypeError,
        r"x has dtype torch\.float16; supported dtypes: torch\.bfloat16$",
    ),
    (
        "fq-w-list",
        lambda: fused(t(4, 256), [1.0] * 4),
        TypeError,
        r"weights must be a torch\.Tensor, got list",
    ),
    (
        "fq-w-bf16",
        lambda: fused(t(4, 256), t(4)),
        TypeError,
        r"weights has dtype torch\.bfloat16; it must be torch\.float32",
    ),
    ("fq-clamp-str", lambda: fused(t(4, 256), None, "7"), TypeError, r"clamp must be a real"),
    ("fq-clamp-bool", lambda: fused(t(4, 256), None, True), TypeError, r"clamp must be a real"),
    ("fq-clamp-tensor", lambda: fused(t(4, 256), None, t(1)), TypeError, r"clamp must be a real"),
    ("fq-out-tensor", lambda: fused(t(4, 256), out=t(4, 128)), TypeError, r"\(q, scale\) tuple"),
    ("fq-out-len", lambda: fused(t(4, 256), out=(t(4, 128),)), TypeError, r"\(q, scale\) tuple"),
    (
        "fq-out-q-dtype",
        lambda: fused(t(4, 256), out=(t(4, 128), t(4, 1, dtype=F32))),
        TypeError,
        r"out\[0\] \(q\) has dtype torch\.bfloat16; this call writes torch\.float8_e4m3fn",
    ),
    (
        "fq-out-scale-dtype",
        lambda: fused(t(4, 256), out=(t(4, 128).to(F8), t(4, 1))),
        TypeError,
        r"out\[1\] \(scale\) has dtype torch\.bfloat16; this call writes torch\.float32",
    ),
    # swiglu_per_token_cast_fp8: shapes and values
    (
        "fq-x-1d",
        lambda: fused(t(256)),
        ValueError,
        r"x must have shape \[M, 2\*H\]; got shape \(256,\)",
    ),
    ("fq-x-3d", lambda: fused(t(2, 2, 256)), ValueError, r"x must have shape \[M, 2\*H\]"),
    (
        "fq-h-not-128",
        lambda: fused(t(4, 200)),
        ValueError,
        r"H % 128 == 0 .* it has 200 columns \(H = 100\)",
    ),
    (
        "fq-h-odd",
        lambda: fused(t(4, 257)),
        ValueError,
        r"x must have shape \[M, 2\*H\]: its dim 1 is 257, not a multiple of 2",
    ),
    (
        "fq-w-shape",
        lambda: fused(t(4, 256), t(5, dtype=F32)),
        ValueError,
        r"weights must have shape \(4,\) to match x \(4, 256\); got \(5,\)",
    ),
    (
        "fq-w-2d",
        lambda: fused(t(4, 256), t(4, 1, dtype=F32)),
        ValueError,
        r"weights must have shape \(4,\); got shape \(4, 1\)",
    ),
    (
        "fq-w-strided",
        lambda: fused(t(4, 256), t(4, 2, dtype=F32)[:, 0]),
        ValueError,
        r"weights is not contiguous",
    ),
    (
        "fq-w-misaligned",
        lambda: fused(t(4, 256), misaligned(4, dtype=F32)),
        ValueError,
        r"weights's data pointer",
    ),
    (
        "fq-w-device",
        lambda: fused(t(4, 256), meta(4, dtype=F32)),
        ValueError,
        r"same CUDA device: x is on cpu, weights on meta",
    ),
    ("fq-x-strided", lambda: fused(t(256, 4).t()), ValueError, r"x is not contiguous"),
    ("fq-x-misaligned", lambda: fused(misaligned(4, 256)), ValueError, r"16-byte aligned"),
    ("fq-x-int32", lambda: fused(meta(2**23, 256)), ValueError, r"below 2\*\*31"),
    ("fq-clamp-0", lambda: fused(t(4, 256), None, 0.0), ValueError, r"clamp must be > 0"),
    ("fq-clamp-neg", lambda: fused(t(4, 256), None, -7), ValueError, r"clamp must be > 0"),
    ("fq-clamp-nan", lambda: fused(t(4, 256), None, math.nan), ValueError, r"got nan"),
    ("fq-clamp-inf", lambda: fused(t(4, 256), None, math.inf), ValueError, r"got inf"),
    ("fq-clamp-huge", lambda: fused(t(4, 256), None, 1e39), ValueError, r"3\.4e38"),
    ("fq-clamp-tiny", lambda: fused(t(4, 256), None, 1e-40), ValueError, r"2\*\*-126"),
    (
        "fq-out-q-shape",
        lambda: fused(t(4, 256), out=(t(4, 256).to(F8), t(4, 1, dtype=F32))),
        ValueError,
        r"out\[0\] \(q\) has shape \(4, 256\); this call writes \(4, 128\)",
    ),
    (
        "fq-out-scale-shape",
        lambda: fused(t(4, 512), out=(t(4, 256).to(F8), t(4, 1, dtype=F32))),
        ValueError,
        r"out\[1\] \(scale\) has shape \(4, 1\); this call writes \(4, 2\)",
    ),
    (
        "fq-out-q-misaligned",
        lambda: fused(t(4, 256), out=(misaligned(4, 128, dtype=torch.uint8).view(F8), t(4, 1))),
        ValueError,
        r"out\[0\] \(q\)'s data pointer",
    ),
    (
        "fq-out-device",
        lambda: fused(t(4, 256), out=(meta(4, 128, dtype=F8), t(4, 1, dtype=F32))),
        ValueError,
        r"out\[0\] \(q\) is on meta",
    ),
    (
        "fq-out-overlap",
        lambda: fused(t(4, 512), out=overlapping_out(4, 256)),
        ValueError,
        r"out\[0\] \(q\) overlaps out\[1\] \(scale\)",
    ),
    (
        "fq-out-in-x",
        lambda: (
            x := t(4, 512),
            fused(x, out=(x.view(F8).view(-1)[:1024].view(4, 256), t(4, 2, dtype=F32))),
        ),
        ValueError,
        r"out\[0\] \(q\) overlaps x",
    ),
    (
        "fq-out-in-weights",
        lambda: (
            w := t(8, dtype=F32),
            fused(t(2, 256), w[:2], out=(t(2, 128).to(F8), w[:2].view(2, 1))),
        ),
        ValueError,
        r"out\[1\] \(scale\) overlaps weights",
    ),
]


test_bad_input_raises_before_launch = refusals_test(BAD_CALLS)


@pytest.mark.parametrize(
    "call",
    [lambda: swiglu(t(4, 64)), lambda: fused(t(4, 256)), lambda: fused(t(0, 256))],
    ids=["swiglu", "fused", "fused-empty"],
)
def test_cpu_tensors_are_rejected(fake, call):
    with pytest.raises(ValueError, match=r"is on device 'cpu'; tileaot kernels run on CUDA"):
        call()
    assert fake.launches == [] and fake.lookups == []


@pytest.mark.parametrize(
    ("dtype", "key"), [(BF16, "bf16"), (F16, "fp16"), (F32, "fp32")], ids=["bf16", "fp16", "fp32"]
)
def test_swiglu_launch_arguments(fake, cpu_as_cuda, dtype, key):
    x = t(3, 2, 2 * 1001, dtype=dtype)
    y = swiglu(x)
    assert (y.shape, y.dtype) == ((3, 2, 1001), dtype)
    assert fake.lookups == [("swiglu", key)]
    assert fake.launches == [
        Launch(1001, 0, STREAM, (x.data_ptr(), y.data_ptr()), (6, 2002, 6, 1001), ())
    ]
    launch = fake.launches[0]
    assert all(type(v) is int for v in (launch.handle, *launch.ptrs, *launch.shapes))


def test_swiglu_out(fake, cpu_as_cuda):
    x, out = t(4, 256, dtype=F16), t(4, 128, dtype=F16)
    assert swiglu(x, out=out) is out
    check_launch(fake.launches[0], "swiglu", x=x, y=out)
    swiglu(x, out=out)
    assert fake.lookups == [("swiglu", "fp16")]  # the handle is looked up once


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize(("clamp", "limit"), [(None, math.inf), (7, 7.0), (2.5, 2.5)])
@pytest.mark.parametrize("round_sf", [False, True])
def test_fused_launch_arguments(fake, cpu_as_cuda, weighted, clamp, limit, round_sf):
    x = t(5, 2 * 384)
    w = t(5, dtype=F32) if weighted else None
    q, scale = fused(x, w, clamp, round_sf=round_sf) if round_sf else fused(x, w, clamp)
    assert (q.shape, q.dtype) == ((5, 384), F8)
    assert (scale.shape, scale.dtype) == ((5, 3), F32)
    assert fake.lookups == [("swiglu_per_token_cast_fp8", "bf16")]
    w_ptr = w.data_ptr() if weighted else x.data_ptr()  # never read without weights
    assert fake.launches == [
        Launch(
            1001,
            0,
            STREAM,
            (x.data_ptr(), w_ptr, q.data_ptr(), scale.data_ptr()),
            (5, 768, 5, 5, 384, 5, 3),
            (limit, 1.0 if weighted else 0.0, 1.0 if round_sf else 0.0),
        )
    ]
    assert all(type(v) is float for v in fake.launches[0].scalars)


def test_fused_out_and_keywords(fake, cpu_as_cuda):
    x, w = t(2, 512), t(2, dtype=F32)
    out = fp8_out(2, 256)
    q, scale = fused(x, weights=w, clamp=torch.tensor(3.0).numpy()[()], out=out)
    assert q is out[0] and scale is out[1]
    check_launch(fake.launches[0], "swiglu_per_token_cast_fp8", x=x, weights=w, q=q, scale=scale)
    assert fake.launches[0].scalars == (3.0, 1.0, 0.0)
    with pytest.raises(TypeError, match="round_sf must be True or False; got int"):
        fused(x, w, round_sf=1)


@pytest.mark.parametrize(
    ("call", "shapes"),
    [
        (lambda: [swiglu(t(0, 64))], [(0, 32)]),
        (lambda: [swiglu(t(2, 0, 64))], [(2, 0, 32)]),
        (lambda: [swiglu(t(4, 0))], [(4, 0)]),
        (lambda: fused(t(0, 256)), [(0, 128), (0, 1)]),
        (lambda: fused(t(0, 256), t(0, dtype=F32), 7.0), [(0, 128), (0, 1)]),
        (lambda: fused(t(3, 0)), [(3, 0), (3, 0)]),
    ],
    ids=["sw-m0", "sw-m0-3d", "sw-h0", "fq-m0", "fq-m0-weights", "fq-h0"],
)
def test_empty_inputs_return_without_launch(fake, cpu_as_cuda, call, shapes):
    outs = call()
    assert [tuple(o.shape) for o in outs] == shapes
    assert fake.launches == [] and fake.lookups == []


def test_docstrings():
    for fn in (swiglu, fused):
        for part in ("Args:", "Returns:", "Raises:", "Example:", "current stream"):
            assert part in fn.__doc__, (fn.__name__, part)


def test_exported_from_the_package():
    for fn in (swiglu, fused):
        assert getattr(tileaot, fn.__name__) is fn and fn.__name__ in tileaot.__all__
