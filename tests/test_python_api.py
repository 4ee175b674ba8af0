"""CPU tests of the Python layer: validation, launch arguments, laziness, `python -m tileaot`.

No GPU and no native module are needed. How the fake works:

* `fake` and `cpu_as_cuda` (tests/_fakes.py, shared with the per-op test files): a recording
  stand-in for `tileaot._C`, and CPU tensors counted as CUDA device 0 (meta tensors as device
  1). Tests without `cpu_as_cuda` show that CPU tensors are rejected.
* Subprocess tests block modules with `sys.modules[name] = None` (then `import name` raises
  ImportError) to run without torch and without `_C`, whatever this environment has installed.
"""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from _fakes import (  # noqa: E402, F401  (also puts python/ on sys.path in a source checkout)
    STREAM,
    FakeC,
    Launch,
    cpu_as_cuda,
    fake,
    meta,
    misaligned,
    refusals_test,
    t,
    tileaot,
)
from _kernel_args import check_launch  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

_lib = importlib.import_module("tileaot._lib")
RMS_NORM = importlib.import_module("tileaot.rms_norm").SCHEMA
PKG_PARENT = str(Path(tileaot.__file__).resolve().parent.parent)


def overlapping_q_scale(m: int, n: int, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    buf = torch.zeros(m * n, dtype=torch.uint8)
    q = buf.view(torch.float8_e4m3fn).view(m, n)
    scale = buf[: m * groups * 4].view(torch.float32).view(m, groups)
    return q, scale


F8 = torch.float8_e4m3fn
rms, cast, gemm = tileaot.rms_norm, tileaot.per_token_cast_fp8, tileaot.gemm

# (id, call, exception, message regex): each call fails exactly one check.
BAD_CALLS = [
    # rms_norm
    ("rms-x-list", lambda: rms([[1.0]], t(1)), TypeError, r"x must be a torch\.Tensor, got list"),
    (
        "rms-x-int32",
        lambda: rms(t(4, 64, dtype=torch.int32), t(64)),
        TypeError,
        r"x has dtype torch\.int32; supported dtypes: torch\.bfloat16, torch\.float16, "
        r"torch\.float32",
    ),
    ("rms-w-none", lambda: rms(t(4, 64), None), TypeError, r"weight must be a torch\.Tensor"),
    (
        "rms-w-dtype",
        lambda: rms(t(4, 64), t(64, dtype=torch.float32)),
        TypeError,
        r"weight has dtype torch\.float32; it must match x \(torch\.bfloat16\)",
    ),
    ("rms-w-shape", lambda: rms(t(4, 64), t(32)), ValueError, r"weight must have shape \(64,\)"),
    ("rms-w-2d", lambda: rms(t(4, 64), t(1, 64)), ValueError, r"weight must have shape \(64,\)"),
    ("rms-x-0d", lambda: rms(t(), t(1)), ValueError, r"0-d"),
    (
        "rms-x-strided",
        lambda: rms(t(64, 4).t(), t(64)),
        ValueError,
        r"x is not contiguous.*"
        r"call \.contiguous\(\)",
    ),
    (
        "rms-x-misaligned",
        lambda: rms(misaligned(4, 64), t(64)),
        ValueError,
        r"x's data pointer"
        r" 0x[0-9a-f]+ is not 16-byte aligned",
    ),
    ("rms-w-misaligned", lambda: rms(t(4, 64), misaligned(64)), ValueError, r"weight's data"),
    ("rms-eps-str", lambda: rms(t(4, 64), t(64), "1e-6"), TypeError, r"eps must be a real"),
    ("rms-eps-neg", lambda: rms(t(4, 64), t(64), -1.0), ValueError, r"eps must be finite and"),
    ("rms-eps-nan", lambda: rms(t(4, 64), t(64), math.nan), ValueError, r"eps must be finite"),
    ("rms-eps-inf", lambda: rms(t(4, 64), t(64), math.inf), ValueError, r"eps must be finite"),
    ("rms-eps-bool", lambda: rms(t(4, 64), t(64), True), TypeError, r"eps must be a real"),
    ("rms-out-list", lambda: rms(t(4, 64), t(64), out=[0]), TypeError, r"out must be a torch"),
    (
        "rms-out-dtype",
        lambda: rms(t(4, 64), t(64), out=t(4, 64, dtype=torch.float32)),
        TypeError,
        r"out has dtype torch\.float32; this call writes torch\.bfloat16",
    ),
    (
        "rms-out-shape",
        lambda: rms(t(4, 64), t(64), out=t(64, 4)),
        ValueError,
        r"out has shape \(64, 4\); this call writes \(4, 64\)",
    ),
    (
        "rms-out-strided",
        lambda: rms(t(4, 64), t(64), out=t(64, 4).t()),
        ValueError,
        r"out is not contiguous",
    ),
    (
        "rms-out-misaligned",
        lambda: rms(t(4, 64), t(64), out=misaligned(4, 64)),
        ValueError,
        r"out's data pointer",
    ),
    ("rms-out-is-x", lambda: (x := t(4, 64), rms(x, t(64), out=x)), ValueError, r"out overlaps x"),
    (
        "rms-out-in-w",
        lambda: (w := t(4, 64), rms(t(1, 64), w[1], out=w[1:2])),
        ValueError,
        r"out overlaps weight",
    ),
    (
        "rms-out-device",
        lambda: rms(t(4, 64), t(64), out=meta(4, 64)),
        ValueError,
        r"out is on meta, but the inputs are on CUDA device 0",
    ),
    (
        "rms-devices",
        lambda: rms(t(4, 64), meta(64)),
        ValueError,
        r"same CUDA device: x is on cpu, weight on meta",
    ),
    (
        "rms-numel-int32",
        lambda: rms(meta(2**21, 1024), meta(1024)),
        ValueError,
        r"x has shape \(2097152, 1024\) \(2147483648 elements\).*below 2\*\*31",
    ),
    ("rms-dim-int32-empty", lambda: rms(meta(2**31, 0), meta(0)), ValueError, r"below 2\*\*31"),
    # per_token_cast_fp8
    (
        "cast-x-int8",
        lambda: cast(t(4, 128, dtype=torch.int8)),
        TypeError,
        r"x has dtype torch\.int8; supported dtypes: torch\.bfloat16",
    ),
    ("cast-x-fp8", lambda: cast(t(4, 128).to(F8)), TypeError, r"x has dtype torch\.float8"),
    ("cast-x-3d", lambda: cast(t(2, 4, 128)), ValueError, r"x must have shape \[M, N\]"),
    (
        "cast-g48",
        lambda: cast(t(4, 256), 48),
        ValueError,
        r"group_size=48 is not supported; supported: 32, 64, 128 .* or None / N \(= 256",
    ),
    (
        "cast-g64-n96",
        lambda: cast(t(4, 96), 64),
        ValueError,
        r"group_size=64 needs N % 64 == 0, but x has N = 96",
    ),
    ("cast-g0", lambda: cast(t(4, 256), 0), ValueError, r"group_size=0 is not supported"),
    ("cast-g-str", lambda: cast(t(4, 256), "128"), TypeError, r"group_size must be an int or"),
    ("cast-g-float", lambda: cast(t(4, 256), 128.0), TypeError, r"group_size must be an int"),
    ("cast-g-bool", lambda: cast(t(4, 256), True), TypeError, r"group_size must be an int"),
    (
        "cast-n-not-128",
        lambda: cast(t(4, 200)),
        ValueError,
        r"group_size=128 needs N % 128 == 0, but x has N = 200",
    ),
    ("cast-strided", lambda: cast(t(256, 4).t()), ValueError, r"x is not contiguous"),
    ("cast-misaligned", lambda: cast(misaligned(4, 128)), ValueError, r"16-byte aligned"),
    (
        "cast-out-tensor",
        lambda: cast(t(4, 128), out=t(4, 128)),
        TypeError,
        r"out must be a \(q, scale\) tuple",
    ),
    (
        "cast-out-len",
        lambda: cast(t(4, 128), out=(t(4, 128).to(F8),)),
        TypeError,
        r"out must be a \(q, scale\) tuple",
    ),
    (
        "cast-out-q-dtype",
        lambda: cast(t(4, 128), out=(t(4, 128), t(4, 1, dtype=torch.float32))),
        TypeError,
        r"out\[0\] \(q\) has dtype torch\.bfloat16; this call writes torch\.float8",
    ),
    (
        "cast-out-scale-shape",
        lambda: cast(t(4, 256), out=(t(4, 256).to(F8), t(4, 1, dtype=torch.float32))),
        ValueError,
        r"out\[1\] \(scale\) has shape \(4, 1\); this call writes \(4, 2\)",
    ),
    (
        "cast-out-scale-dtype",
        lambda: cast(t(4, 256), None, out=(t(4, 256).to(F8), t(4, 1))),
        TypeError,
        r"out\[1\] \(scale\) has dtype torch\.bfloat16; this call writes torch\.float32",
    ),
    (
        "cast-out-overlap",
        lambda: cast(t(4, 256), out=overlapping_q_scale(4, 256, 2)),
        ValueError,
        r"out\[0\] \(q\) overlaps out\[1\] \(scale\)",
    ),
    ("cast-numel-int32", lambda: cast(meta(2**24, 128)), ValueError, r"below 2\*\*31"),
    # gemm
    (
        "gemm-fp32",
        lambda: gemm(t(8, 8, dtype=torch.float32), t(8, 8, dtype=torch.float32)),
        TypeError,
        r"a has dtype torch\.float32; supported dtypes: torch\.bfloat16, torch\.float16$",
    ),
    (
        "gemm-b-dtype",
        lambda: gemm(t(8, 8), t(8, 8, dtype=torch.float16)),
        TypeError,
        r"b has dtype torch\.float16; it must match a \(torch\.bfloat16\)",
    ),
    ("gemm-b-array", lambda: gemm(t(8, 8), [[0.0] * 8] * 8), TypeError, r"b must be a torch"),
    (
        "gemm-a-1d",
        lambda: gemm(t(8), t(8, 8)),
        ValueError,
        r"a must have shape \[M, K\]; got shape \(8,\)",
    ),
    (
        "gemm-k-mismatch",
        lambda: gemm(t(4, 64), t(16, 32)),
        ValueError,
        r"b must have shape \[N, 64\] to match a \(4, 64\); got \(16, 32\)",
    ),
    (
        "gemm-k-odd",
        lambda: gemm(t(4, 12), t(16, 12)),
        ValueError,
        r"K % 8 == 0 and N % 8 == 0 \(16-byte rows\); got K = 12, N = 16",
    ),
    ("gemm-n-odd", lambda: gemm(t(4, 16), t(12, 16)), ValueError, r"got K = 16, N = 12"),
    ("gemm-b-strided", lambda: gemm(t(4, 64), t(64, 16).t()), ValueError, r"b is not contiguous"),
    (
        "gemm-a-misaligned",
        lambda: gemm(misaligned(4, 64), t(16, 64)),
        ValueError,
        r"a's data pointer",
    ),
    ("gemm-devices", lambda: gemm(t(4, 64), meta(16, 64)), ValueError, r"same CUDA device"),
    (
        "gemm-c-int32",
        lambda: gemm(meta(2**16, 8), meta(2**16, 8)),
        ValueError,
        r"c \(the output\) has shape \(65536, 65536\)",
    ),
    (
        "gemm-out-shape",
        lambda: gemm(t(4, 64), t(16, 64), out=t(16, 4)),
        ValueError,
        r"out has shape \(16, 4\); this call writes \(4, 16\)",
    ),
    (
        "gemm-out-dtype",
        lambda: gemm(t(4, 64), t(16, 64), out=t(4, 16, dtype=torch.float16)),
        TypeError,
        r"out has dtype torch\.float16",
    ),
    (
        "gemm-out-in-b",
        lambda: (b := t(16, 64), gemm(t(1, 64), b, out=b[0, :16].view(1, 16))),
        ValueError,
        r"out overlaps b",
    ),
]


test_bad_input_raises_before_launch = refusals_test(BAD_CALLS)


@pytest.mark.parametrize(
    "call",
    [
        lambda: rms(t(4, 64), t(64)),
        lambda: cast(t(4, 128)),
        lambda: gemm(t(4, 64), t(16, 64)),
        lambda: rms(t(0, 64), t(64)),  # empty inputs are still checked
    ],
    ids=["rms_norm", "per_token_cast_fp8", "gemm", "rms_norm-empty"],
)
def test_cpu_tensors_are_rejected(fake, call):
    with pytest.raises(ValueError, match=r"is on device 'cpu'; tileaot kernels run on CUDA"):
        call()
    assert fake.launches == [] and fake.lookups == []


def test_rms_norm_launch_arguments(fake, cpu_as_cuda):
    x, w = t(3, 2, 64), t(64)
    y = rms(x, w, 1e-5)
    assert y.shape == x.shape and y.dtype == torch.bfloat16
    assert fake.lookups == [("rms_norm", "bf16")]
    (launch,) = fake.launches
    check_launch(launch, RMS_NORM, x=x.view(6, 64), weight=w, y=y.view(6, 64))  # leading dims: M
    assert (launch.handle, launch.stream, launch.scalars) == (1001, STREAM, (1e-5,))
    assert launch.device == 0
    assert all(type(v) is int for v in (launch.handle, *launch.ptrs, *launch.shapes))
    assert type(launch.scalars[0]) is float


@pytest.mark.parametrize("eps", [0, 1e-6, torch.tensor(0.5).numpy()[()]])
def test_rms_norm_eps_is_passed_as_float(fake, cpu_as_cuda, eps):
    rms(t(2, 16, dtype=torch.float32), t(16, dtype=torch.float32), eps)
    (scalar,) = fake.launches[0].scalars
    assert type(scalar) is float and scalar == float(eps)
    assert fake.lookups == [("rms_norm", "fp32")]


def test_rms_norm_out(fake, cpu_as_cuda):
    x, w, out = (
        t(4, 64, dtype=torch.float16),
        t(64, dtype=torch.float16),
        t(4, 64, dtype=torch.float16),
    )
    assert rms(x, w, out=out) is out
    check_launch(fake.launches[0], RMS_NORM, x=x, weight=w, y=out)
    assert fake.lookups == [("rms_norm", "fp16")]


@pytest.mark.parametrize(
    ("group_size", "key", "groups"),
    [
        (128, "fp16,g128", 2),
        (64, "fp16,g64", 4),
        (32, "fp16,g32", 8),
        (None, "fp16,token", 1),
        (256, "fp16,token", 1),
    ],
)
@pytest.mark.parametrize("round_sf", [False, True])
def test_per_token_cast_launch_arguments(fake, cpu_as_cuda, group_size, key, groups, round_sf):
    x = t(4, 256, dtype=torch.float16)
    q, scale = cast(x, group_size, round_sf=round_sf) if round_sf else cast(x, group_size)
    assert (q.shape, q.dtype) == ((4, 256), F8)
    assert (scale.shape, scale.dtype) == ((4, groups), torch.float32)
    assert fake.lookups == [("per_token_cast_fp8", key)]
    assert fake.launches == [
        Launch(
            1001,
            0,
            STREAM,
            (x.data_ptr(), q.data_ptr(), scale.data_ptr()),
            (4, 256, 4, 256, 4, groups),
            (1.0 if round_sf else 0.0,),  # the kernel's round_sf (default False)
        )
    ]


@pytest.mark.parametrize("bad", [1, None, "yes", 1.0])
def test_per_token_cast_round_sf_must_be_a_bool(fake, cpu_as_cuda, bad):
    with pytest.raises(TypeError, match="round_sf must be True or False; got "):
        cast(t(4, 256), 128, round_sf=bad)
    assert fake.launches == []


@pytest.mark.parametrize(("group_size", "split"), [(128, True), (32, True), (None, False)])
def test_tall_per_token_casts_split_past_grid_y(fake, cpu_as_cuda, group_size, split):
    """g128 puts 64-row tiles on gridDim.y (65535 at most): taller inputs take more launches;
    the token mode puts rows on gridDim.x and never splits."""
    rows = 65535 * 64
    m, n = rows + 7, 256
    x = meta(m, n)  # no memory: pointers are 0-based, which is all the fake looks at
    q, scale = cast(x, group_size)
    groups = scale.shape[1]
    if not split:
        assert [launch.shapes for launch in fake.launches] == [(m, n, m, n, m, groups)]
        return
    assert [launch.shapes for launch in fake.launches] == [
        (rows, n, rows, n, rows, groups),
        (7, n, 7, n, 7, groups),
    ]
    first, second = (launch.ptrs for launch in fake.launches)
    assert first == (x.data_ptr(), q.data_ptr(), scale.data_ptr())
    assert second == (
        x.data_ptr() + rows * n * 2,
        q.data_ptr() + rows * n,
        scale.data_ptr() + rows * groups * 4,
    )


def test_per_token_cast_out(fake, cpu_as_cuda):
    x = t(2, 128, dtype=torch.float32)
    out = (t(2, 128).to(F8), t(2, 1, dtype=torch.float32))
    q, scale = cast(x, out=out)
    assert q is out[0] and scale is out[1]
    check_launch(fake.launches[0], "per_token_cast_fp8", x=x, q=out[0], scale=out[1])
    assert fake.lookups == [("per_token_cast_fp8", "fp32,g128")]


def test_gemm_launch_arguments(fake, cpu_as_cuda):
    a, b = t(5, 32), t(24, 32)
    c = gemm(a, b)
    assert (c.shape, c.dtype) == ((5, 24), torch.bfloat16)
    assert fake.lookups == [("gemm", "bf16")]
    assert fake.launches == [
        Launch(
            1001, 0, STREAM, (a.data_ptr(), b.data_ptr(), c.data_ptr()), (5, 32, 24, 32, 5, 24), ()
        )
    ]


def test_gemm_out(fake, cpu_as_cuda):
    a, b, out = (
        t(8, 16, dtype=torch.float16),
        t(8, 16, dtype=torch.float16),
        t(8, 8, dtype=torch.float16),
    )
    assert gemm(a, b, out=out) is out
    assert fake.launches[0].ptrs[2] == out.data_ptr()


@pytest.mark.parametrize(
    ("call", "shapes"),
    [
        (lambda: [rms(t(0, 64), t(64))], [(0, 64)]),
        (lambda: [rms(t(2, 0, 64), t(64))], [(2, 0, 64)]),
        (lambda: [rms(t(4, 0), t(0))], [(4, 0)]),
        (lambda: cast(t(0, 256)), [(0, 256), (0, 2)]),
        (lambda: cast(t(0, 256), None), [(0, 256), (0, 1)]),
        (lambda: cast(t(3, 0)), [(3, 0), (3, 0)]),
        (lambda: [gemm(t(0, 16), t(8, 16))], [(0, 8)]),
        (lambda: [gemm(t(4, 16), t(0, 16))], [(4, 0)]),
    ],
    ids=[
        "rms-m0",
        "rms-m0-3d",
        "rms-n0",
        "cast-m0",
        "cast-m0-token",
        "cast-n0",
        "gemm-m0",
        "gemm-n0",
    ],
)
def test_empty_inputs_return_without_launch(fake, cpu_as_cuda, call, shapes):
    assert [tuple(r.shape) for r in call()] == shapes
    assert fake.launches == [] and fake.lookups == []


def test_empty_rows_get_defined_per_token_scales(fake, cpu_as_cuda):
    out = (t(3, 0).to(F8), torch.full((3, 1), 7.0))
    _, scale = cast(t(3, 0), None, out=out)
    assert torch.equal(scale, torch.zeros(3, 1))
    assert fake.launches == []


def test_gemm_k0_returns_zeros_without_launch(fake, cpu_as_cuda):
    c = gemm(t(4, 0), t(8, 0))
    assert torch.equal(c, torch.zeros(4, 8, dtype=torch.bfloat16))
    out = torch.ones(4, 8, dtype=torch.bfloat16)
    assert gemm(t(4, 0), t(8, 0), out=out) is out
    assert torch.equal(out, torch.zeros(4, 8, dtype=torch.bfloat16))
    assert fake.launches == [] and fake.lookups == []


def test_handles_are_looked_up_once_per_op_and_key(fake, cpu_as_cuda):
    x16, w16 = t(2, 64, dtype=torch.float16), t(64, dtype=torch.float16)
    for _ in range(3):
        rms(t(2, 64), t(64))
        rms(x16, w16)
    gemm(t(8, 8), t(8, 8))
    assert fake.lookups == [("rms_norm", "bf16"), ("rms_norm", "fp16"), ("gemm", "bf16")]
    assert [launch.handle for launch in fake.launches] == [1001, 1002] * 3 + [1003]
    assert _lib._handles == {
        ("rms_norm", "bf16"): 1001,
        ("rms_norm", "fp16"): 1002,
        ("gemm", "bf16"): 1003,
    }


def test_lookup_miss_is_not_cached(fake, cpu_as_cuda):
    fake.missing.add(("gemm", "fp16"))
    for _ in range(2):
        with pytest.raises(FakeC.VariantMissError, match="no variant of gemm for key fp16"):
            gemm(t(8, 8, dtype=torch.float16), t(8, 8, dtype=torch.float16))
    assert fake.lookups == [("gemm", "fp16")] * 2 and fake.launches == []
    assert _lib._handles == {}


def test_native_errors_propagate_unchanged(fake, cpu_as_cuda, monkeypatch):
    def launch(*args):
        raise FakeC.DriverError("cuLaunchKernelEx failed: CUDA_ERROR_LAUNCH_FAILED")

    monkeypatch.setattr(fake, "launch", launch)
    with pytest.raises(tileaot.DriverError, match="CUDA_ERROR_LAUNCH_FAILED"):
        rms(t(2, 64), t(64))
    assert tileaot.VariantMissError is FakeC.VariantMissError


def test_missing_native_module_gives_clear_import_error(cpu_as_cuda, monkeypatch):
    monkeypatch.setattr(_lib, "_native", None)
    monkeypatch.setattr(_lib, "_handles", {})
    monkeypatch.setitem(sys.modules, "tileaot._C", None)  # `import tileaot._C` now fails
    with pytest.raises(ImportError, match=r"native module \(tileaot\._C\) is not built.*pip"):
        rms(t(2, 64), t(64))
    with pytest.raises(ImportError, match="is not built"):
        tileaot.VariantMissError  # noqa: B018
    assert rms(t(0, 64), t(64)).shape == (0, 64)  # nothing to launch, nothing to load


def test_current_stream_uses_torchs_raw_accessor(monkeypatch):
    # Start unresolved (earlier GPU tests may have resolved it); restored afterwards.
    monkeypatch.setattr(_lib, "current_stream", _lib._resolve_current_stream)

    def raw(device: int) -> int:
        return 100 + device

    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", raw, raising=False)
    assert _lib.current_stream(3) == 103
    assert _lib.current_stream is raw  # resolved once; later calls go straight to torch


def test_current_stream_falls_back_to_public_api(monkeypatch):
    monkeypatch.setattr(_lib, "current_stream", _lib._resolve_current_stream)
    monkeypatch.delattr(torch._C, "_cuda_getCurrentRawStream", raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d: SimpleNamespace(cuda_stream=77))
    assert _lib.current_stream(0) == 77
    assert _lib.current_stream(1) == 77


def test_public_api_and_docstrings():
    assert isinstance(tileaot.__version__, str) and tileaot.__version__
    for op in (rms, cast, gemm):
        for section in ("Args:", "Returns:", "Raises:", "current stream", "Example:", ">>> "):
            assert section in op.__doc__, (op.__name__, section)
    assert {"rms_norm", "per_token_cast_fp8", "gemm", "info"} <= set(tileaot.__all__)
    with pytest.raises(AttributeError):
        tileaot.no_such_op  # noqa: B018


def test_info_with_gpu(fake, capsys):
    fake.arch = "sm_90a"
    main = importlib.import_module("tileaot.__main__").main
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "archs in this build: sm_80 sm_90a" in out
    assert "    bf16\n      n4096            sm_90a\n      any              sm_90a sm_80" in out
    assert "device 0: sm_90a" in out
    assert "-> rms_norm_bf16_any" in out
    assert "-> per_token_cast_fp8_bf16_g128_any" in out
    assert "-> none: no variant of rms_norm for fp16 on sm_90a\n" in out  # first line only
    assert "-> none: no Python wrapper" in out  # topk: built, but no wrapper here
    assert ("rms_norm", "bf16", 0, (4096,) * 5) in fake.selects
    assert ("per_token_cast_fp8", "bf16,g128", 0, (4096, 7168, 4096, 7168, 4096, 56)) in (
        fake.selects
    )


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([PKG_PARENT, os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120
    )


_NO_TORCH = "import sys; sys.modules['torch'] = None\n"  # `import torch` raises from here on
_RUN_MAIN = "import runpy; runpy.run_module('tileaot', run_name='__main__', alter_sys=True)\n"

_FAKE_C_NO_GPU = """
import types
c = types.ModuleType("tileaot._C")
class VariantMissError(LookupError): pass
class DriverError(RuntimeError): pass
def device_arch(device): raise DriverError("CUDA driver not found (libcuda.so.1)")
c.VariantMissError, c.DriverError, c.device_arch = VariantMissError, DriverError, device_arch
c.build_archs = lambda: "sm_70,sm_75,sm_80,sm_86,sm_89,sm_90a,sm_100a"
c.build_ops = lambda: "*"
c.variants = lambda: [dict(name="rms_norm_bf16_any", op="rms_norm", key="bf16", spec="any",
                           arch=a, signature="", blob_arch=a) for a in ("sm_90a", "sm_80")]
sys.modules["tileaot._C"] = c
"""


def test_import_does_not_import_torch_or_native():
    code = (
        "import sys, tileaot\n"
        "tileaot.rms_norm, tileaot.per_token_cast_fp8, tileaot.gemm, tileaot.info\n"
        "from tileaot import *\n"
        "names = ('torch', 'tileaot._C', 'importlib.metadata')\n"
        "loaded = [m for m in names if sys.modules.get(m) is not None]\n"
        "assert not loaded, loaded\n"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    done = _run(_NO_TORCH + code + "print(tileaot.__version__)")
    assert done.returncode == 0, done.stderr


def test_info_without_native_module_fails_clearly():
    done = _run(_NO_TORCH + "sys.modules['tileaot._C'] = None\n" + _RUN_MAIN, "info")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "native module (tileaot._C) is not built" in done.stderr
    assert "Traceback" not in done.stderr


def test_info_without_gpu_and_without_torch():
    done = _run(_NO_TORCH + _FAKE_C_NO_GPU + _RUN_MAIN, "info")
    assert done.returncode == 0, done.stderr
    assert "archs in this build: sm_70 sm_75 sm_80 sm_86 sm_89 sm_90a sm_100a" in done.stdout
    assert "  rms_norm\n    bf16\n      any              sm_90a sm_80" in done.stdout
    assert "device 0: no CUDA device/driver: CUDA driver not found" in done.stdout
