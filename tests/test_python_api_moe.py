"""CPU tests of the moe_expand / moe_reduce Python layer: validation before any launch, launch
arguments, empty inputs, `out=`. No GPU and no native module (see tests/_fakes.py)."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import STREAM, Launch, cpu_as_cuda, fake, meta, misaligned, refusals_test, t, tileaot  # noqa: E402, F401
from _kernel_args import check_launch  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

F8, I32, F32, BF16 = torch.float8_e4m3fn, torch.int32, torch.float32, torch.bfloat16
expand, reduce_ = tileaot.moe_expand, tileaot.moe_reduce
MOE_EXPAND = importlib.import_module("tileaot.moe_expand").SCHEMA
MOE_REDUCE = importlib.import_module("tileaot.moe_reduce").SCHEMA


def idx(tokens: int, slots: int) -> torch.Tensor:
    return t(tokens, slots, dtype=I32)


def fp8(*shape: int) -> torch.Tensor:
    return t(*shape).to(F8)


def expand_out(rows: int, h: int, e: int, tokens: int, slots: int, scale_cols: int = 0):
    out = (t(rows, h), torch.zeros(e + 1, dtype=I32), idx(tokens, slots))
    if scale_cols:
        out = (t(rows, h).to(F8), *out[1:], t(rows, scale_cols, dtype=F32))
    return out


# (id, call, exception, message regex): each call breaks exactly one rule.
BAD_CALLS = [
    # moe_expand: types and dtypes
    ("exp-x-list", lambda: expand([[1.0]], idx(1, 1), 8), TypeError, r"x must be a torch\.Tensor"),
    (
        "exp-x-fp16",
        lambda: expand(t(4, 64, dtype=torch.float16), idx(4, 2), 8),
        TypeError,
        r"x has dtype torch\.float16; supported dtypes: torch\.bfloat16, torch\.float8_e4m3fn",
    ),
    (
        "exp-idx-int64",
        lambda: expand(t(4, 64), idx(4, 2).long(), 8),
        TypeError,
        r"idx has dtype torch\.int64; it must be torch\.int32",
    ),
    ("exp-idx-none", lambda: expand(t(4, 64), None, 8), TypeError, r"idx must be a torch\.Tensor"),
    ("exp-e-float", lambda: expand(t(4, 64), idx(4, 2), 8.0), TypeError, r"num_experts must be"),
    ("exp-e-bool", lambda: expand(t(4, 64), idx(4, 2), True), TypeError, r"num_experts must be"),
    ("exp-e-none", lambda: expand(t(4, 64), idx(4, 2), None), TypeError, r"num_experts must be"),
    ("exp-a-str", lambda: expand(t(4, 64), idx(4, 2), 8, "16"), TypeError, r"alignment must be"),
    # moe_expand: shapes and values
    (
        "exp-x-1d",
        lambda: expand(t(64), idx(4, 2), 8),
        ValueError,
        r"x must have shape \[T, H\]; got shape \(64,\)",
    ),
    (
        "exp-idx-1d",
        lambda: expand(t(4, 64), idx(8, 1)[:, 0], 8),
        ValueError,
        r"idx must have shape \[4, K\]; got shape \(8,\)",
    ),
    (
        "exp-t-differ",
        lambda: expand(t(4, 64), idx(5, 2), 8),
        ValueError,
        r"idx must have shape \[4, K\] to match x \(4, 64\); got \(5, 2\)",
    ),
    ("exp-e-0", lambda: expand(t(4, 64), idx(4, 2), 0), ValueError, r"num_experts must be in"),
    (
        "exp-e-1025",
        lambda: expand(t(4, 64), idx(4, 2), 1025),
        ValueError,
        r"num_experts must be in \[1, 1024\]; got 1025",
    ),
    ("exp-a-0", lambda: expand(t(4, 64), idx(4, 2), 8, 0), ValueError, r"alignment must be in"),
    (
        "exp-a-1025",
        lambda: expand(t(4, 64), idx(4, 2), 8, 1025),
        ValueError,
        r"alignment must be in \[1, 1024\]; got 1025",
    ),
    (
        "exp-fp8-no-scale",
        lambda: expand(fp8(4, 256), idx(4, 2), 8),
        ValueError,
        r"x has dtype torch\.float8_e4m3fn: pass x_scale \[T, H // 128\]",
    ),
    (
        "exp-fp8-h",
        lambda: expand(fp8(4, 200), idx(4, 2), 8, x_scale=t(4, 1, dtype=F32)),
        ValueError,
        r"H % 128 == 0",
    ),
    (
        "exp-fp8-scale-dtype",
        lambda: expand(fp8(4, 256), idx(4, 2), 8, x_scale=t(4, 2)),
        TypeError,
        r"x_scale has dtype torch\.bfloat16; it must be torch\.float32",
    ),
    (
        "exp-fp8-scale-shape",
        lambda: expand(fp8(4, 256), idx(4, 2), 8, x_scale=t(4, 1, dtype=F32)),
        ValueError,
        r"x_scale must have shape \[4, 2\] to match x \(4, 256\); got \(4, 1\)",
    ),
    (
        "exp-bf16-scale",
        lambda: expand(t(4, 256), idx(4, 2), 8, x_scale=t(4, 2, dtype=F32)),
        ValueError,
        r"x_scale is only for x of dtype float8_e4m3fn; x has dtype torch\.bfloat16",
    ),
    # moe_expand: memory
    ("exp-x-strided", lambda: expand(t(64, 4).t(), idx(4, 2), 8), ValueError, r"x is not contig"),
    (
        "exp-idx-misaligned",
        lambda: expand(t(4, 64), misaligned(4, 2, dtype=I32), 8),
        ValueError,
        r"idx's data pointer 0x[0-9a-f]+ is not 16-byte aligned",
    ),
    (
        "exp-scale-misaligned",
        lambda: expand(fp8(4, 256), idx(4, 2), 8, x_scale=misaligned(4, 2, dtype=F32)),
        ValueError,
        r"x_scale's data pointer",
    ),
    (
        "exp-devices",
        lambda: expand(t(4, 64), meta(4, 2, dtype=I32), 8),
        ValueError,
        r"same CUDA device: x is on cpu, idx on meta",
    ),
    (
        "exp-rows-int32",
        lambda: expand(meta(2**18, 2048), meta(2**18, 8, dtype=I32), 8),
        ValueError,
        r"x_sorted .* \(2097272, 2048\) .*below 2\*\*31",
    ),
    (
        "exp-entries-int32",
        lambda: expand(meta(2**20 - 1, 16), meta(2**20 - 1, 2048, dtype=I32), 8, 1),
        ValueError,
        r"T \* K = 2147481600 entries; moe_expand handles fewer than",
    ),
    # moe_expand: out=
    (
        "exp-out-tensor",
        lambda: expand(t(4, 64), idx(4, 2), 8, out=t(128, 64)),
        TypeError,
        r"out must be a \(x_sorted, expert_offsets, token_pos\) tuple of tensors; got Tensor",
    ),
    (
        "exp-out-len-fp8",
        lambda: expand(fp8(4, 128), idx(4, 2), 8, x_scale=t(4, 1, dtype=F32), out=(1, 2, 3)),
        TypeError,
        r"token_pos, x_sorted_scale\) tuple of tensors; got a tuple of 3",
    ),
    (
        "exp-out-rows",
        lambda: expand(t(4, 64), idx(4, 2), 8, out=expand_out(100, 64, 8, 4, 2)),
        ValueError,
        r"out\[0\] \(x_sorted\) has shape \(100, 64\); this call writes \(128, 64\)",
    ),
    (
        "exp-out-offsets-dtype",
        lambda: expand(
            t(4, 64), idx(4, 2), 8, out=(t(128, 64), t(9, dtype=torch.int64), idx(4, 2))
        ),
        TypeError,
        r"out\[1\] \(expert_offsets\) has dtype torch\.int64; this call writes torch\.int32",
    ),
    (
        "exp-out-scale-shape",
        lambda: expand(
            fp8(4, 256),
            idx(4, 2),
            8,
            1,
            x_scale=t(4, 2, dtype=F32),
            out=expand_out(8, 256, 8, 4, 2, scale_cols=1),
        ),
        ValueError,
        r"out\[3\] \(x_sorted_scale\) has shape \(8, 1\); this call writes \(8, 2\)",
    ),
    (
        "exp-out-pos-is-idx",
        lambda: (i := idx(4, 2), expand(t(4, 64), i, 8, out=(t(128, 64), idx(9, 1)[:, 0], i))),
        ValueError,
        r"out\[2\] \(token_pos\) overlaps idx",
    ),
    # moe_reduce
    ("red-y-list", lambda: reduce_([[1.0]], idx(1, 1)), TypeError, r"y_sorted must be a torch"),
    (
        "red-y-fp16",
        lambda: reduce_(t(8, 64, dtype=torch.float16), idx(4, 2)),
        TypeError,
        r"y_sorted has dtype torch\.float16; supported dtypes: torch\.bfloat16, torch\.float32",
    ),
    (
        "red-y-fp8",
        lambda: reduce_(fp8(8, 64), idx(4, 2)),
        TypeError,
        r"y_sorted has dtype torch\.float8_e4m3fn",
    ),
    (
        "red-pos-int64",
        lambda: reduce_(t(8, 64), idx(4, 2).long()),
        TypeError,
        r"token_pos has dtype torch\.int64; it must be torch\.int32",
    ),
    (
        "red-w-bf16",
        lambda: reduce_(t(8, 64), idx(4, 2), t(4, 2)),
        TypeError,
        r"weights has dtype torch\.bfloat16; it must be torch\.float32",
    ),
    (
        "red-out-dtype-arg",
        lambda: reduce_(t(8, 64), idx(4, 2), out_dtype=torch.float16),
        TypeError,
        r"out_dtype must be torch\.bfloat16 or torch\.float32",
    ),
    (
        "red-out-dtype",
        lambda: reduce_(t(8, 64), idx(4, 2), None, BF16, out=t(4, 64, dtype=F32)),
        TypeError,
        r"out has dtype torch\.float32; this call writes torch\.bfloat16",
    ),
    ("red-out-list", lambda: reduce_(t(8, 64), idx(4, 2), out=[0]), TypeError, r"out must be a"),
    (
        "red-y-1d",
        lambda: reduce_(t(64), idx(4, 2)),
        ValueError,
        r"y_sorted must have shape \[P, H\]; got shape \(64,\)",
    ),
    ("red-pos-3d", lambda: reduce_(t(8, 64), idx(8, 4).view(2, 4, 4)), ValueError, r"\[T, K\]"),
    (
        "red-w-shape",
        lambda: reduce_(t(8, 64), idx(4, 2), t(2, 4, dtype=F32)),
        ValueError,
        r"weights must have shape \[4, 2\] to match token_pos \(4, 2\); got \(2, 4\)",
    ),
    (
        "red-out-shape",
        lambda: reduce_(t(8, 64), idx(4, 2), out=t(4, 32)),
        ValueError,
        r"out has shape \(4, 32\); this call writes \(4, 64\)",
    ),
    (
        "red-out-is-y",
        lambda: (y := t(8, 64), reduce_(y, idx(4, 2), out=y[:4])),
        ValueError,
        r"out overlaps y_sorted",
    ),
    ("red-y-strided", lambda: reduce_(t(64, 8).t(), idx(4, 2)), ValueError, r"not contiguous"),
    (
        "red-w-misaligned",
        lambda: reduce_(t(8, 64), idx(4, 2), misaligned(4, 2, dtype=F32)),
        ValueError,
        r"weights's data pointer",
    ),
    (
        "red-devices",
        lambda: reduce_(t(8, 64), meta(4, 2, dtype=I32)),
        ValueError,
        r"same CUDA device: y_sorted is on cpu, token_pos on meta",
    ),
    (
        "red-out-int32",
        lambda: reduce_(meta(8, 2048), meta(2**20, 1, dtype=I32)),
        ValueError,
        r"out \(the output\) has shape \(1048576, 2048\) \(2147483648 elements\)",
    ),
]


test_bad_input_raises_before_any_launch = refusals_test(BAD_CALLS)


@pytest.mark.parametrize("op", [expand, reduce_])
def test_cpu_tensors_are_rejected(fake, op):
    with pytest.raises(ValueError, match=r"is on device 'cpu'; tileaot kernels run on CUDA"):
        op(t(4, 128), idx(4, 2), 8) if op is expand else op(t(8, 128), idx(4, 2))
    assert fake.launches == []


# --- moe_expand launches ----------------------------------------------------------------------


@pytest.mark.parametrize(("e", "align"), [(8, 16), (3, 1), (1024, 128), (5, 3)])
def test_expand_bf16_launch_arguments(fake, cpu_as_cuda, e, align):
    x, i = t(6, 256), idx(6, 4)
    xs, offsets, pos, scale = expand(x, i, e, align)
    rows = 24 + e * (align - 1)
    assert (xs.shape, xs.dtype) == ((rows, 256), BF16)
    assert (offsets.shape, offsets.dtype) == ((e + 1,), I32)
    assert (pos.shape, pos.dtype) == ((6, 4), I32)
    assert scale is None
    assert fake.lookups == [("moe_expand", "bf16")]
    (launch,) = fake.launches
    at = check_launch(
        launch, MOE_EXPAND, x=x, idx=i, x_sorted=xs, expert_offsets=offsets, token_pos=pos,
        chunk_counts=(1, e), expert_counts=(e,), work=(24,),
    )  # fmt: skip
    # One chunk of counts, then the totals, then the work list, each on a 16-byte boundary.
    assert at["expert_counts"] - at["chunk_counts"] == -(-e // 4) * 16
    assert at["work"] - at["expert_counts"] == -(-e // 4) * 16
    assert all(p % 16 == 0 for p in at.values())
    assert (launch.handle, launch.device, launch.stream, launch.scalars) == (
        1001,
        0,
        STREAM,
        (align,),
    )
    assert all(type(v) is int for v in (*launch.ptrs, *launch.shapes, *launch.scalars))


def test_expand_fp8_launch_arguments(fake, cpu_as_cuda):
    x, s, i = fp8(3, 384), t(3, 3, dtype=F32), idx(3, 1000)  # 3000 entries: 3 chunks
    result = expand(x, i, 64, 128, x_scale=s)
    xs, offsets, pos, xs_scale = result
    rows = 3000 + 64 * 127
    assert (xs.shape, xs.dtype, xs_scale.shape, xs_scale.dtype) == ((rows, 384), F8, (rows, 3), F32)
    assert result.x_sorted_scale is xs_scale and result.token_pos is pos
    assert fake.lookups == [("moe_expand", "e4m3")]
    (launch,) = fake.launches
    at = check_launch(
        launch, MOE_EXPAND, x=x, x_scale=s, idx=i, x_sorted=xs, x_sorted_scale=xs_scale,
        expert_offsets=offsets, token_pos=pos, chunk_counts=(3, 64), expert_counts=(64,),
        work=(3000,),
    )  # fmt: skip
    assert at["expert_counts"] - at["chunk_counts"] == 3 * 64 * 4
    assert at["work"] - at["expert_counts"] == 64 * 4
    assert launch.scalars == (128,)


def test_expand_out_tuple_is_written(fake, cpu_as_cuda):
    out = expand_out(8 + 4 * 15, 64, 4, 4, 2)
    x, i = t(4, 64), idx(4, 2)
    result = expand(x, i, 4, out=out)
    assert all(r is o for r, o in zip(result[:3], out, strict=True)) and result[3] is None
    check_launch(
        fake.launches[0], MOE_EXPAND, x=x, idx=i, x_sorted=out[0], expert_offsets=out[1],
        token_pos=out[2], chunk_counts=(1, 4), expert_counts=(4,), work=(8,),
    )  # fmt: skip
    out8 = expand_out(8, 256, 4, 4, 2, scale_cols=2)
    result = expand(fp8(4, 256), idx(4, 2), 4, 1, x_scale=t(4, 2, dtype=F32), out=list(out8))
    assert all(r is o for r, o in zip(result, out8, strict=True))


@pytest.mark.parametrize(("tokens", "slots"), [(0, 8), (5, 0), (0, 0)])
def test_expand_empty_routing_zeroes_offsets_without_launch(fake, cpu_as_cuda, tokens, slots):
    xs, offsets, pos, _ = expand(t(tokens, 64), idx(tokens, slots), 6, 16)
    assert xs.shape == (tokens * slots + 6 * 15, 64)
    assert torch.equal(offsets, torch.zeros(7, dtype=I32))
    assert pos.shape == (tokens, slots)
    assert fake.launches == [] and fake.lookups == []


def test_expand_h0_still_routes(fake, cpu_as_cuda):
    xs, _, _, _ = expand(t(4, 0), idx(4, 2), 8, 1)
    assert xs.shape == (8, 0)
    assert fake.launches[0].shapes[:6] == (4, 0, 4, 2, 8, 0)


def test_expand_accepts_integer_scalars(fake, cpu_as_cuda):
    import numpy as np

    expand(t(2, 64), idx(2, 2), np.int64(8), torch.tensor(16).numpy()[()])
    assert fake.launches[0].scalars == (16,) and type(fake.launches[0].scalars[0]) is int
    assert fake.launches[0].shapes[-2] == 8  # E (the last shape is the work list's T * K)


# --- moe_reduce launches ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("y_dtype", "out_dtype", "weighted", "key"),
    [
        (BF16, None, True, "bf16,bf16,weighted"),
        (BF16, F32, True, "bf16,fp32,weighted"),
        (F32, BF16, False, "fp32,bf16,sum"),
        (F32, None, False, "fp32,fp32,sum"),
    ],
)
def test_reduce_launch_arguments(fake, cpu_as_cuda, y_dtype, out_dtype, weighted, key):
    y, pos = t(40, 96, dtype=y_dtype), idx(5, 3)
    w = t(5, 3, dtype=F32) if weighted else None
    out = reduce_(y, pos, w, out_dtype)
    assert (out.shape, out.dtype) == ((5, 96), out_dtype or y_dtype)
    assert fake.lookups == [("moe_reduce", key)]
    (launch,) = fake.launches
    weights = {"weights": w} if weighted else {}  # left out of the launch without
    check_launch(launch, MOE_REDUCE, y_sorted=y, token_pos=pos, out=out, **weights)
    assert (launch.handle, launch.device, launch.stream, launch.scalars) == (1001, 0, STREAM, ())


def test_reduce_out_sets_the_default_dtype(fake, cpu_as_cuda):
    out = t(5, 64, dtype=F32)
    assert reduce_(t(40, 64), idx(5, 2), out=out) is out
    assert fake.lookups == [("moe_reduce", "bf16,fp32,sum")]
    assert fake.launches[0].ptrs[-1] == out.data_ptr()


@pytest.mark.parametrize(
    ("p", "h", "tokens", "slots", "zeros"),
    [(8, 64, 0, 2, False), (8, 0, 3, 2, False), (8, 64, 3, 0, True), (0, 64, 3, 2, True)],
    ids=["t0", "h0", "k0", "p0"],
)
def test_reduce_empty_inputs_launch_nothing(fake, cpu_as_cuda, p, h, tokens, slots, zeros):
    out = torch.full((tokens, h), 7.0)
    assert reduce_(t(p, h, dtype=F32), idx(tokens, slots), out=out) is out
    assert torch.equal(out, torch.zeros_like(out) if zeros else torch.full_like(out, 7.0))
    assert fake.launches == [] and fake.lookups == []


def test_handles_are_looked_up_once(fake, cpu_as_cuda):
    for _ in range(3):
        expand(t(2, 64), idx(2, 2), 8)
        reduce_(t(8, 64), idx(2, 2), t(2, 2, dtype=F32))
    assert fake.lookups == [("moe_expand", "bf16"), ("moe_reduce", "bf16,bf16,weighted")]
    assert [launch.handle for launch in fake.launches] == [1001, 1002] * 3


def test_public_api_and_docstrings():
    assert {"moe_expand", "moe_reduce"} <= set(tileaot.__all__)
    for op in (expand, reduce_):
        for section in ("Args:", "Returns:", "Raises:", "current stream", "Example:", ">>> "):
            assert section in op.__doc__, (op.__name__, section)
    assert tileaot.MoeExpandResult._fields == (
        "x_sorted",
        "expert_offsets",
        "token_pos",
        "x_sorted_scale",
    )


def test_launch_is_recorded_as_a_dataclass(fake, cpu_as_cuda):
    reduce_(t(8, 64), idx(2, 2))
    assert isinstance(fake.launches[0], Launch)
