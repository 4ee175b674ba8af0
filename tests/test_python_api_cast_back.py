"""CPU tests of the cast_back Python layer: scale-layout inference, validation before any
launch, launch arguments, empty inputs, `out=`, launches split past gridDim.y, and the hand-off
of packed FP4 input. No GPU and no native module (see tests/_fakes.py)."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

torch = pytest.importorskip("torch")

from _fakes import STREAM, Launch, cpu_as_cuda, fake, meta, misaligned, refusals_test, t  # noqa: E402, F401
from _kernel_args import check_launch  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

F8, F32, BF16 = torch.float8_e4m3fn, torch.float32, torch.bfloat16
_mod = importlib.import_module("tileaot.cast_back")
cast_back = _mod.cast_back
FP4_MODULE = "tileaot._cast_back_fp4"


def q8(m: int, n: int) -> torch.Tensor:
    return t(m, n).to(F8)


def u8(*shape: int) -> torch.Tensor:
    return torch.randint(0, 256, shape, dtype=torch.uint8)


def s32(*shape: int) -> torch.Tensor:
    return t(*shape, dtype=F32)


def out_over_q():
    """q in the first bytes of out (both contiguous and aligned)."""
    out = t(4, 128)
    q = out.view(-1).view(torch.uint8)[: 4 * 128].view(F8).view(4, 128)
    return cast_back(q, s32(4, 1), out=out)


def out_over_scale():
    out = s32(4, 128)
    return cast_back(q8(4, 128), out.view(-1)[:4].view(4, 1), out_dtype=F32, out=out)


# (id, call, exception, message regex): each call breaks exactly one rule.
BAD_CALLS = [
    ("q-list", lambda: cast_back([[1]], s32(1, 1)), TypeError, r"q must be a torch\.Tensor"),
    (
        "q-bf16",
        lambda: cast_back(t(4, 128), s32(4, 1)),
        TypeError,
        r"q has dtype torch\.bfloat16; supported: torch\.float8_e4m3fn, torch\.uint8 \(packed",
    ),
    ("scale-none", lambda: cast_back(q8(4, 128), None), TypeError, r"scale must be a torch"),
    (
        "scale-bf16",
        lambda: cast_back(q8(4, 128), t(4, 1)),
        TypeError,
        r"scale has dtype torch\.bfloat16; it must be torch\.float32",
    ),
    (
        "out-dtype-fp16",
        lambda: cast_back(q8(4, 128), s32(4, 1), out_dtype=torch.float16),
        TypeError,
        r"out_dtype must be torch\.bfloat16 or torch\.float32; got torch\.float16",
    ),
    (
        "out-dtype-str",
        lambda: cast_back(q8(4, 128), s32(4, 1), out_dtype="bfloat16"),
        TypeError,
        r"out_dtype must be torch\.bfloat16 or torch\.float32; got 'bfloat16'",
    ),
    (
        "q-1d",
        lambda: cast_back(q8(1, 128)[0], s32(1, 1)),
        ValueError,
        r"q must have shape \[M, N\]; got shape \(128,\)",
    ),
    (
        "scale-1d",
        lambda: cast_back(q8(4, 128), s32(4)),
        ValueError,
        r"scale must have shape \[R, C\]; got shape \(4,\)",
    ),
    (
        "scale-shape",
        lambda: cast_back(q8(300, 256), s32(300, 3)),
        ValueError,
        r"scale has shape \[300, 3\], which fits no scale layout of q \[300, 256\] \(expected "
        r"g128: \[300, 2\]; token: \[300, 1\]; block128: \[3, 2\]; g32: \[300, 8\]; "
        r"g64: \[300, 4\]\)",
    ),
    (
        "scale-g128-odd-n",
        lambda: cast_back(q8(300, 200), s32(300, 1), layout="g128"),
        ValueError,
        r"fits no scale layout of q \[300, 200\] \(expected g128: needs N % 128 == 0\)",
    ),
    (
        "layout-mismatch",
        lambda: cast_back(q8(300, 256), s32(300, 2), layout="block128"),
        ValueError,
        r"scale has shape \[300, 2\].*\(expected block128: \[3, 2\]\)",
    ),
    (
        "layout-unknown",
        lambda: cast_back(q8(4, 128), s32(4, 1), layout="g16"),
        ValueError,
        r"layout='g16' is unknown; supported: g128, token, block128, g32, g64",
    ),
    (
        "scale-g64-odd-n",
        lambda: cast_back(q8(3, 96), s32(3, 1), layout="g64"),
        ValueError,
        r"fits no scale layout of q \[3, 96\] \(expected g64: needs N % 64 == 0\)",
    ),
    (
        "group-size-48",
        lambda: cast_back(q8(3, 96), s32(3, 2), group_size=48),
        ValueError,
        r"group_size=48 is not supported for FP8 q: use None, 128 .*64, 32 \(g64, g32\)",
    ),
    (
        "layout-int",
        lambda: cast_back(q8(4, 128), s32(4, 1), layout=128),
        TypeError,
        r"layout must be a str or None, got int",
    ),
    (
        "group-64-g128-scale",
        lambda: cast_back(q8(4, 256), s32(4, 2), group_size=64),
        ValueError,
        r"scale has shape \[4, 2\], which fits no scale layout .*\(expected g64: \[4, 4\]\)",
    ),
    (
        "group-str",
        lambda: cast_back(q8(4, 256), s32(4, 2), group_size="128"),
        TypeError,
        r"group_size must be an int or None, got str",
    ),
    (
        "group-bool",
        lambda: cast_back(q8(4, 256), s32(4, 2), group_size=True),
        TypeError,
        r"group_size must be an int or None, got bool",
    ),
    (
        "group-vs-layout",
        lambda: cast_back(q8(4, 256), s32(4, 1), layout="token", group_size=128),
        ValueError,
        r"layout='token' does not match group_size=128",
    ),
    (
        "group-n-vs-g128-scale",
        lambda: cast_back(q8(4, 256), s32(4, 2), group_size=256),
        ValueError,
        r"scale has shape \[4, 2\].*\(expected token: \[4, 1\]\)",
    ),
    ("q-strided", lambda: cast_back(q8(256, 4).t(), s32(4, 2)), ValueError, r"q is not contig"),
    (
        "q-misaligned",
        lambda: cast_back(misaligned(4, 128, dtype=torch.uint8).view(F8), s32(4, 1)),
        ValueError,
        r"q's data pointer 0x[0-9a-f]+ is not 16-byte aligned",
    ),
    (
        "scale-misaligned",
        lambda: cast_back(q8(4, 128), misaligned(4, 1, dtype=F32)),
        ValueError,
        r"scale's data pointer 0x[0-9a-f]+ is not 16-byte aligned",
    ),
    (
        "scale-strided",
        lambda: cast_back(q8(4, 256), s32(2, 4).t()),
        ValueError,
        r"scale is not contiguous",
    ),
    (
        "devices",
        lambda: cast_back(q8(4, 128), meta(4, 1, dtype=F32)),
        ValueError,
        r"same CUDA device: q is on cpu, scale on meta",
    ),
    (
        "q-numel",
        lambda: cast_back(meta(2**24, 128, dtype=F8), meta(2**24, 1, dtype=F32)),
        ValueError,
        r"q has shape \(16777216, 128\) .*below 2\*\*31",
    ),
    (
        "out-dtype",
        lambda: cast_back(q8(4, 128), s32(4, 1), out=s32(4, 128)),
        TypeError,
        r"out has dtype torch\.float32; this call writes torch\.bfloat16",
    ),
    (
        "out-shape",
        lambda: cast_back(q8(4, 128), s32(4, 1), out=t(128, 4)),
        ValueError,
        r"out has shape \(128, 4\); this call writes \(4, 128\)",
    ),
    (
        "out-misaligned",
        lambda: cast_back(q8(4, 128), s32(4, 1), out=misaligned(4, 128)),
        ValueError,
        r"out's data pointer",
    ),
    (
        "out-device",
        lambda: cast_back(q8(4, 128), s32(4, 1), out=meta(4, 128)),
        ValueError,
        r"out is on meta, but the inputs are on CUDA device 0",
    ),
    ("out-over-q", lambda: out_over_q(), ValueError, r"out overlaps q"),
    ("out-over-scale", lambda: out_over_scale(), ValueError, r"out overlaps scale"),
    (
        "fp4-layout",
        lambda: cast_back(u8(4, 64), s32(4, 8), layout="g128"),
        ValueError,
        r"layout='g128' applies to FP8 q only; packed FP4 q takes group_size",
    ),
]


test_bad_input_raises_before_launch = refusals_test(BAD_CALLS)


def test_cpu_tensors_are_rejected(fake):
    with pytest.raises(ValueError, match=r"q is on device 'cpu'; tileaot kernels run on CUDA"):
        cast_back(q8(4, 128), s32(4, 1))
    assert fake.launches == [] and fake.lookups == []


# (m, n, scale shape, layout inferred)
LAYOUT_CASES = [
    (300, 7168, (300, 56), "g128"),
    (300, 7168, (300, 1), "token"),
    (300, 7168, (3, 56), "block128"),
    (37, 1000, (37, 1), "token"),
    (37, 1000, (1, 8), "block128"),
    (1, 256, (1, 2), "g128"),  # also block128's shape: the same scales either way
    (200, 128, (200, 1), "g128"),  # also token's: one group per row
    (1, 100, (1, 1), "token"),  # also block128's: one scale
    (300, 7168, (300, 224), "g32"),
    (300, 7168, (300, 112), "g64"),
    (5, 96, (5, 3), "g32"),  # N not a multiple of 128
    (1, 64, (1, 1), "token"),  # also g64's (and block128's): one scale
]


@pytest.mark.parametrize(("out_dtype", "okey"), [(None, "bf16"), (BF16, "bf16"), (F32, "fp32")])
@pytest.mark.parametrize(("m", "n", "sshape", "layout"), LAYOUT_CASES)
def test_layout_inference_and_launch_arguments(
    fake, cpu_as_cuda, m, n, sshape, layout, out_dtype, okey
):
    q, scale = q8(m, n), s32(*sshape)
    x = cast_back(q, scale, out_dtype=out_dtype)
    assert (x.shape, x.dtype) == ((m, n), F32 if okey == "fp32" else BF16)
    assert x.is_contiguous()
    assert fake.lookups == [("cast_back_fp8", f"{okey},{layout}")]
    assert fake.launches == [
        Launch(
            1001,
            0,
            STREAM,
            (q.data_ptr(), scale.data_ptr(), x.data_ptr()),
            (m, n, *sshape, m, n),
            (),
        )
    ]
    launch = fake.launches[0]
    assert all(type(v) is int for v in (launch.handle, *launch.ptrs, *launch.shapes))


@pytest.mark.parametrize(
    ("sshape", "kwargs", "layout"),
    [
        ((4, 2), {"layout": "g128"}, "g128"),
        ((4, 2), {"group_size": 128}, "g128"),
        ((1, 2), {"group_size": 128}, "block128"),
        ((4, 1), {"group_size": 256}, "token"),
        ((4, 1), {"layout": "token", "group_size": 256}, "token"),
        ((1, 2), {"layout": "block128", "group_size": 128}, "block128"),
        ((4, 8), {"group_size": 32}, "g32"),
        ((4, 4), {"layout": "g64", "group_size": 64}, "g64"),
    ],
)
def test_explicit_layout_and_group_size(fake, cpu_as_cuda, sshape, kwargs, layout):
    cast_back(q8(4, 256), s32(*sshape), **kwargs)
    assert fake.lookups == [("cast_back_fp8", f"bf16,{layout}")]


def test_ambiguous_shape_takes_the_explicit_layout(fake, cpu_as_cuda):
    cast_back(q8(1, 256), s32(1, 2), layout="block128")  # g128 would fit too
    assert fake.lookups == [("cast_back_fp8", "bf16,block128")]


def test_out(fake, cpu_as_cuda):
    q, scale, out = q8(130, 257), s32(2, 3), s32(130, 257)
    assert cast_back(q, scale, out_dtype=F32, out=out) is out
    check_launch(fake.launches[0], "cast_back_fp8", q=q, scale=scale, x=out)
    assert fake.lookups == [("cast_back_fp8", "fp32,block128")]


@pytest.mark.parametrize(
    ("m", "n", "sshape"), [(0, 256, (0, 2)), (0, 256, (0, 1)), (3, 0, (3, 1)), (0, 7, (0, 1))]
)
def test_empty_inputs_return_without_launch(fake, cpu_as_cuda, m, n, sshape):
    x = cast_back(q8(m, n), s32(*sshape))
    assert x.shape == (m, n) and x.dtype == BF16
    assert fake.launches == [] and fake.lookups == []


@pytest.mark.parametrize("layout", ["token", "block128", "g128"])
def test_tall_inputs_are_split_into_several_launches(fake, cpu_as_cuda, layout):
    rows = _mod._ROWS_PER_LAUNCH
    assert rows % 128 == 0 and rows // 32 <= 65535  # 32 rows per CTA (TILE_ROWS)
    m, n = rows + 300, 128
    sshape = {"token": (m, 1), "g128": (m, 1), "block128": (-(-m // 128), 1)}[layout]
    q, scale = meta(m, n, dtype=F8), meta(*sshape, dtype=F32)
    x = cast_back(q, scale, layout=layout)
    assert x.shape == (m, n)
    first_s, second_s = {
        "token": ((rows, 1), (300, 1)),
        "g128": ((rows, 1), (300, 1)),
        "block128": ((rows // 128, 1), (3, 1)),
    }[layout]
    assert [launch.shapes for launch in fake.launches] == [
        (rows, n, *first_s, rows, n),
        (300, n, *second_s, 300, n),
    ]
    s_offset = (rows // 128 if layout == "block128" else rows) * 4
    assert fake.launches[1].ptrs == (
        q.data_ptr() + rows * n,
        scale.data_ptr() + s_offset,
        x.data_ptr() + rows * n * 2,
    )
    assert fake.lookups == [("cast_back_fp8", f"bf16,{layout}")]


# --- packed FP4 -----------------------------------------------------------------------------


def test_fp4_input_goes_to_the_fp4_module(fake, monkeypatch):
    calls = []

    def cast_back_fp4(q, scale, *, group_size, out_dtype, out):
        calls.append((q, scale, group_size, out_dtype, out))
        return "fp4 result"

    module = types.ModuleType(FP4_MODULE)
    module.cast_back_fp4 = cast_back_fp4
    monkeypatch.setitem(sys.modules, FP4_MODULE, module)
    q, scale, out = u8(4, 64), u8(4, 8), t(4, 128)
    assert cast_back(q, scale, group_size=16, out=out) == "fp4 result"
    assert calls == [(q, scale, 16, BF16, out)]  # out_dtype None means bfloat16
    cast_back(q, scale, group_size=32, out_dtype=F32)
    assert calls[-1][2:] == (32, F32, None)
    assert fake.launches == [] and fake.lookups == []


def test_fp4_input_without_fp4_module_is_not_implemented(fake, monkeypatch):
    monkeypatch.setitem(sys.modules, FP4_MODULE, None)  # `import` of it now fails
    with pytest.raises(NotImplementedError, match=r"packed FP4\).*no FP4 dequantisation"):
        cast_back(u8(4, 64), u8(4, 8), group_size=16)
    assert fake.launches == [] and fake.lookups == []


def test_docstring_and_example_shapes():
    for section in ("Args:", "Returns:", "Raises:", "current stream", "Example:", ">>> "):
        assert section in cast_back.__doc__, section
    op_module = importlib.import_module("tileaot.cast_back_fp8")  # what `tileaot info` imports
    for layout, scale in (("g128", (4096, 56)), ("token", (4096, 1)), ("block128", (32, 56))):
        _, shapes = op_module.example_shapes(f"bf16,{layout}")
        assert shapes == (4096, 7168, *scale, 4096, 7168)
