"""The ops' short path (`_lib.fast` → `_C.call`) passes exactly what the checked path launched.

CPU tests with a module-typed fake of `tileaot._C` (`_lib.learn` only trusts a real module, so
the recording fakes of _fakes.py never see the short path). For each op that has one: a first
call runs the checked path and records its `launch`; a second, identical call must go through
`call`, with tensors whose data pointers are the launch's pointers and whose shapes,
concatenated, are the launch's shape values, the same scalars, and the output bits set on
exactly the tensors the op writes. A short path that passed other shapes (a flattened view, a
scale layout) would launch the right kernel on the wrong sizes; this is where that shows.

`_C.call` checks the number of tensors and the total number of dims, not each tensor's rank:
the fake checks the same, and BAD_RANKS holds arguments that keep the total but move a dim
from one tensor to another, which the ops' own guards must send to the checked path.
"""

from __future__ import annotations

import importlib
import types

import pytest
import torch
from _fakes import STREAM, cpu_as_cuda, t, tileaot  # noqa: F401  (fixtures)

_lib = importlib.import_module("tileaot._lib")


class _Refused(LookupError):
    """Stands in for `_C.VariantMissError`."""


def _module_fake(call_result: object = True) -> types.ModuleType:
    """A module-typed `_C` stand-in recording lookup/launch/call."""
    native = types.ModuleType("tileaot._C")
    native.launches, native.calls, native.handles = [], [], {}
    native.counts = {}  # handle -> (tensors, shape values) of its launches, as `_C` knows them

    def lookup(op: str, key: str) -> int:
        return native.handles.setdefault((op, key), 100 + len(native.handles))

    def launch(handle, device, stream, ptrs, shapes, scalars):
        native.launches.append((handle, device, stream, tuple(ptrs), tuple(shapes), scalars))
        native.counts[handle] = (len(ptrs), len(shapes))

    def call(handle, tensors, scalars, outputs=0):
        counts = native.counts.get(handle)
        if counts is not None and counts != (len(tensors), sum(x.dim() for x in tensors)):
            raise ValueError("wrong number of tensors or shape values")  # as `_C.call` does
        native.calls.append((handle, tensors, tuple(scalars), outputs))
        if isinstance(call_result, BaseException):
            raise call_result
        return call_result

    native.lookup, native.launch, native.call = lookup, launch, call
    native.VariantMissError = _Refused
    return native


@pytest.fixture
def module_fake(monkeypatch: pytest.MonkeyPatch, cpu_as_cuda) -> types.ModuleType:  # noqa: F811
    native = _module_fake()
    monkeypatch.setattr(_lib, "_native", native)
    monkeypatch.setattr(_lib, "_handles", {})
    monkeypatch.setattr(_lib, "_fast", {})
    monkeypatch.setattr(_lib, "current_stream", lambda device: STREAM)
    return native


def _f32(*shape: int) -> torch.Tensor:
    return torch.randn(shape)


def _e4m3(*shape: int) -> torch.Tensor:
    return torch.randn(shape).to(torch.float8_e4m3fn)


def _u8(*shape: int) -> torch.Tensor:
    return torch.randint(0, 255, shape, dtype=torch.uint8)


def _i32(*shape: int) -> torch.Tensor:
    return torch.randint(0, 20, shape, dtype=torch.int32)


def _engram_inputs(rows: int = 4, h: int = 64) -> tuple[torch.Tensor, ...]:
    return t(rows, h), t(rows, h), t(rows, h), t(h), t(h)


# "op" or "op/case": argument builder (fresh tensors, out= given). The tensors the op writes are
# the out= ones: their indices in the call's tensor tuple are found, not listed.
CASES = {
    "rms_norm": lambda: ((t(7, 4096), t(4096)), {"eps": 1e-5, "out": t(7, 4096)}),
    "swiglu": lambda: ((t(5, 2 * 2048),), {"out": t(5, 2048)}),
    "gemm": lambda: ((t(9, 64), t(32, 64)), {"out": t(9, 32)}),
    "topk_gate": lambda: (
        (_f32(11, 256), 8),
        {"out": (torch.empty(11, 8, dtype=torch.int32), _f32(11, 8))},
    ),
    "sinkhorn_normalize": lambda: (
        (_f32(6, 4, 4),),
        {"repeat": 3, "eps": 1e-6, "out": _f32(6, 4, 4)},
    ),
    "per_token_cast_fp8": lambda: (
        (t(13, 512),),
        {"out": (torch.empty(13, 512, dtype=torch.float8_e4m3fn), _f32(13, 4))},
    ),
    "expand_to_mhc": lambda: ((t(5, 2048), 4), {"out": t(5, 4, 2048)}),
    "expand_to_mhc_backward": lambda: ((t(5, 4, 2048),), {"out": t(5, 2048)}),
    "mhc_pre_apply_mix": lambda: ((t(5, 4, 2048), _f32(5, 4, 1)), {"out": t(5, 2048)}),
    "mhc_pre_apply_mix_backward": lambda: (
        (t(5, 2048), t(5, 4, 2048), _f32(5, 4, 1)),
        {"out": (t(5, 4, 2048), _f32(5, 4, 1))},
    ),
    "mhc_post": lambda: (
        (t(5, 2048), t(5, 4, 2048), _f32(5, 4, 1), _f32(5, 4, 4)),
        {"out": t(5, 4, 2048)},
    ),
    "per_token_cast_fp8/g32": lambda: ((t(13, 512), 32), {"out": (_e4m3(13, 512), _f32(13, 16))}),
    "swiglu_per_token_cast_fp8": lambda: (
        (t(5, 512), _f32(5)),
        {"clamp": 7.0, "out": (_e4m3(5, 256), _f32(5, 2))},
    ),
    "per_block_cast_fp8": lambda: ((t(130, 300),), {"out": (_e4m3(130, 300), _f32(2, 3))}),
    "per_channel_cast_fp8": lambda: ((t(130, 24),), {"out": (_e4m3(130, 24), _f32(2, 24))}),
    "per_token_cast_fp4": lambda: (
        (t(13, 512), 16, "e4m3"),
        {"out": (_u8(13, 256), _e4m3(13, 32))},
    ),
    "cast_back/g128": lambda: ((_e4m3(9, 512), _f32(9, 4)), {"out": t(9, 512)}),
    "cast_back/token": lambda: (
        (_e4m3(9, 512), _f32(9, 1)),
        {"out_dtype": torch.float32, "out": _f32(9, 512)},
    ),
    "cast_back/block128": lambda: (
        (_e4m3(130, 300), _f32(2, 3)),
        {"layout": "block128", "out": t(130, 300)},
    ),
    "cast_back/g32": lambda: ((_e4m3(9, 96), _f32(9, 3)), {"out": t(9, 96)}),
    "cast_back/g64": lambda: ((_e4m3(9, 512), _f32(9, 8)), {"out": t(9, 512)}),
    "moe_reduce/sum": lambda: ((t(20, 64), _i32(6, 2)), {"out": t(6, 64)}),
    "moe_reduce/weighted": lambda: (
        (t(20, 64), _i32(6, 2), _f32(6, 2)),
        {"out_dtype": torch.float32, "out": _f32(6, 64)},
    ),
    "transpose": lambda: ((t(3, 5, 8),), {"out": t(3, 8, 5)}),
    "engram_gate": lambda: (
        _engram_inputs(),
        {"eps": 1e-6, "return_gate": True, "out": (t(4, 64), _f32(4))},
    ),
}


def _written(tensors: tuple, out) -> set[int]:
    """Indices in the call's tensor tuple of the `out=` tensors (what the op must mark as
    written): found by data pointer, so a view of an output counts."""
    outs = {o.data_ptr() for o in (out if isinstance(out, tuple) else (out,))}
    return {i for i, x in enumerate(tensors) if x.data_ptr() in outs}


def _op(name: str):
    return getattr(tileaot, name.partition("/")[0])


@pytest.mark.parametrize("name", sorted(CASES))
def test_second_call_passes_what_the_first_launched(module_fake, name):
    args, kwargs = CASES[name]()
    op = _op(name)
    op(*args, **kwargs)  # the checked path: launch, then learn
    assert len(module_fake.launches) == 1 and not module_fake.calls
    handle, _, _, ptrs, shapes, scalars = module_fake.launches[0]
    op(*args, **kwargs)
    assert len(module_fake.launches) == 1, "the second call did not take the short path"
    (call_handle, tensors, call_scalars, outputs) = module_fake.calls[0]
    assert call_handle == handle
    assert tuple(x.data_ptr() for x in tensors) == ptrs
    assert tuple(d for x in tensors for d in x.shape) == shapes
    assert call_scalars == tuple(float(s) for s in scalars)
    written = _written(tensors, kwargs["out"])
    assert written and {i for i in range(len(tensors)) if outputs >> i & 1} == written


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocating_call_passes_fresh_outputs_of_the_launched_shapes(module_fake, name):
    args, kwargs = CASES[name]()
    kwargs.pop("out")
    op = _op(name)
    op(*args, **kwargs)
    shapes = module_fake.launches[0][4]
    result = op(*args, **kwargs)
    assert len(module_fake.launches) == 1
    _, tensors, _, outputs = module_fake.calls[0]
    assert tuple(d for x in tensors for d in x.shape) == shapes
    results = result if isinstance(result, tuple) else (result,)
    # The tensors marked as written are the ones returned, in order: the fresh outputs.
    assert [x for i, x in enumerate(tensors) if outputs >> i & 1] == list(results)


# CASES name: arguments whose tensors have the total number of dims of the case's, one dim
# moved between two of them, so that the shape values could still fit the kernel's pattern
# (rms_norm's: weight [N, M], y [N] reads as x [M, N], weight [N], y [M, N]). The checked path
# refuses each; a short path without a rank guard would hand them to `call` (and, on a GPU,
# write past the end of the smaller output).
BAD_RANKS = {
    "rms_norm": lambda: ((t(7, 64), t(64, 7)), {"out": t(64)}),
    "topk_gate": lambda: (
        (_f32(11, 256), 8),
        {"out": (torch.empty(11, dtype=torch.int32), _f32(8, 11, 8))},
    ),
    "per_token_cast_fp8": lambda: ((t(13, 512),), {"out": (_e4m3(13), _f32(512, 13, 4))}),
    "swiglu_per_token_cast_fp8": lambda: (
        (t(5, 512), _f32(5)),
        {"out": (_e4m3(5), _f32(256, 5, 2))},
    ),
    "per_block_cast_fp8": lambda: ((t(130, 300),), {"out": (_e4m3(130), _f32(300, 2, 3))}),
    "per_channel_cast_fp8": lambda: ((t(130, 24),), {"out": (_e4m3(130), _f32(24, 2, 24))}),
    "per_token_cast_fp4": lambda: (
        (t(13, 512), 16, "e4m3"),
        {"out": (_u8(13), _e4m3(256, 13, 32))},
    ),
    "moe_reduce/weighted": lambda: (
        (t(20, 64), _i32(6, 2), _f32(6)),
        {"out_dtype": torch.float32, "out": _f32(2, 6, 64)},
    ),
    "engram_gate": lambda: (
        (*_engram_inputs()[:3], t(64, 1), t(64)[0]),
        {"return_gate": True, "out": (t(4, 64), _f32(4))},
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_RANKS))
def test_tensors_of_other_ranks_go_to_the_checked_path(module_fake, name):
    args, kwargs = CASES[name]()
    op = _op(name)
    op(*args, **kwargs)  # learn
    args, kwargs = BAD_RANKS[name]()
    with pytest.raises((TypeError, ValueError)):
        op(*args, **kwargs)
    assert module_fake.calls == []


def test_rms_norm_short_path_takes_a_parameter_weight(module_fake):
    x, w = t(7, 64), torch.nn.Parameter(t(64), requires_grad=False)
    tileaot.rms_norm(x, w)
    tileaot.rms_norm(x, w)
    assert len(module_fake.launches) == 1 and module_fake.calls[0][1][1] is w


def test_gemm_short_path_takes_a_parameter_weight(module_fake):
    a, b = t(9, 64), torch.nn.Parameter(t(32, 64), requires_grad=False)
    tileaot.gemm(a, b)
    c = tileaot.gemm(a, b)
    assert len(module_fake.launches) == 1 and module_fake.calls[0][1][1] is b
    assert c.shape == (9, 32)


def test_swiglu_per_token_cast_fp8_without_weights_is_never_short(module_fake):
    """Without weights the launch passes x's pointer as the [M] weights: no tensor the short
    path could pass, so such a call neither takes the short path nor teaches it."""
    x, w = t(5, 512), _f32(5)
    tileaot.swiglu_per_token_cast_fp8(x)
    assert _lib._fast == {}
    tileaot.swiglu_per_token_cast_fp8(x, w)  # learns
    tileaot.swiglu_per_token_cast_fp8(x)
    assert len(module_fake.launches) == 3 and module_fake.calls == []
    tileaot.swiglu_per_token_cast_fp8(x, w)
    assert len(module_fake.launches) == 3 and len(module_fake.calls) == 1


@pytest.mark.parametrize(
    ("m", "n", "scale_shape", "layout"),
    [
        (1, 128, (1, 1), "g128"),  # every layout fits: the first, g128
        (4, 128, (4, 1), "g128"),
        (4, 256, (4, 1), "token"),
        (4, 256, (4, 2), "g128"),
        (1, 300, (1, 3), "block128"),  # rows == M, yet only block128 fits
        (200, 256, (2, 2), "block128"),
        (4, 256, (4, 8), "g32"),
        (4, 256, (4, 4), "g64"),
        (1, 64, (1, 1), "token"),  # g64 and block128 fit too: token comes first
        (1, 96, (1, 3), "g32"),  # rows == M == 1, block128 would be (1, 1)
    ],
)
def test_cast_back_short_path_infers_the_checked_paths_layout(
    module_fake, m, n, scale_shape, layout
):
    q, scale = _e4m3(m, n), _f32(*scale_shape)
    tileaot.cast_back(q, scale)
    handle = module_fake.launches[0][0]
    assert module_fake.handles["cast_back_fp8", f"bf16,{layout}"] == handle
    tileaot.cast_back(q, scale)
    assert len(module_fake.launches) == 1 and module_fake.calls[0][0] == handle


def test_cast_back_fp4_and_group_size_calls_take_the_checked_path(module_fake):
    q, scale = _e4m3(4, 256), _f32(4, 2)
    tileaot.cast_back(q, scale)
    tileaot.cast_back(q, scale, group_size=128)  # narrows the layouts: left to the checked path
    codes, exps = _u8(4, 128), _u8(4, 8)
    tileaot.cast_back(codes, exps, group_size=32)
    tileaot.cast_back(codes, exps, group_size=32)
    assert len(module_fake.launches) == 4 and module_fake.calls == []


def test_moe_reduce_short_path_never_allocates_past_int32(module_fake):
    """The short path allocates `out` [T, H] before `_C.call` sees it: past 2**31 elements it
    leaves the call to the checked path's ValueError instead of a huge allocation."""
    tileaot.moe_reduce(t(4, 64), _i32(2, 1))
    with pytest.raises(ValueError, match="2\\*\\*31"):
        tileaot.moe_reduce(t(1, 1 << 16), _i32(1 << 16, 1))
    assert module_fake.calls == []


def test_moe_reduce_out_dtype_defaults_to_outs_then_y_sorteds(module_fake):
    y, pos = t(20, 64), _i32(6, 2)
    tileaot.moe_reduce(y, pos, out=_f32(6, 64))  # bf16 -> fp32, from out's dtype
    tileaot.moe_reduce(y, pos, out=_f32(6, 64))
    assert len(module_fake.launches) == 1 and len(module_fake.calls) == 1
    assert tileaot.moe_reduce(y, pos).dtype == torch.bfloat16  # another key: checked path
    assert len(module_fake.launches) == 2


def test_transpose_short_path_only_for_3d_x_of_the_kernels_dtype(module_fake):
    x2, x16 = t(5, 8), t(3, 5, 8, dtype=torch.int16)
    for x in (x2, x2, x16, x16):  # 2-D: a view would be needed; int16 runs bf16's kernel
        assert tileaot.transpose(x).shape[-2:] == (8, 5)
    assert len(module_fake.launches) == 4 and module_fake.calls == []


def test_engram_gate_short_path_keeps_return_gate_and_autograd(module_fake):
    h, k, v, w_h, w_k = _engram_inputs()
    tileaot.engram_gate(h, k, v, w_h, w_k)
    y = t(4, 64)
    assert tileaot.engram_gate(h, k, v, w_h, w_k, out=y) is y
    out, gate = tileaot.engram_gate(h, k, v, w_h, w_k, return_gate=True)
    assert len(module_fake.launches) == 1 and len(module_fake.calls) == 2
    assert module_fake.calls[1][1][5:] == (out, gate) and gate.shape == (4,)
    assert gate.dtype == torch.float32
    w_h.requires_grad_(True)
    tileaot.engram_gate(h, k, v, w_h, w_k)  # recorded by autograd: the checked path
    assert len(module_fake.launches) == 2 and len(module_fake.calls) == 2
    with torch.no_grad():  # not recorded: short again, as for inference with nn.Parameters
        tileaot.engram_gate(h, k, v, torch.nn.Parameter(w_h.detach()), w_k)
    assert len(module_fake.launches) == 2 and len(module_fake.calls) == 3


def test_refused_short_path_falls_back_to_the_checked_path(module_fake, monkeypatch):
    """Whatever `call` raises (a check in C++, a shape no variant takes), the op runs its
    checked path: the precise Python error, or the launch if the checked path accepts it."""
    x, w, y = t(7, 4096), t(4096), t(7, 4096)
    tileaot.rms_norm(x, w, out=y)
    for error in (ValueError("not contiguous"), TypeError("dtype"), _Refused("no variant")):
        monkeypatch.setattr(module_fake, "call", _module_fake(error).call)
        tileaot.rms_norm(x, w, out=y)
    assert len(module_fake.launches) == 4  # the first call and three fallbacks
    with pytest.raises(ValueError, match="overlaps"):
        tileaot.rms_norm(x, w, out=x)  # the checked path's own message


def test_empty_tensor_leaves_the_op_to_its_checked_path(module_fake, monkeypatch):
    """`call` returns False for empty tensors; per-token scales of empty rows are then zeroed
    by the checked path, not left as garbage."""
    x = t(3, 512)
    tileaot.per_token_cast_fp8(x, None)
    monkeypatch.setattr(module_fake, "call", _module_fake(False).call)
    empty = t(3, 0)
    q, scale = tileaot.per_token_cast_fp8(empty, None)
    assert scale.shape == (3, 1) and torch.equal(scale, torch.zeros(3, 1))


def test_learn_ignores_fakes_that_are_not_modules(monkeypatch):
    monkeypatch.setattr(_lib, "_fast", {})
    monkeypatch.setattr(_lib, "_native", object())
    _lib.learn(("rms_norm", torch.bfloat16), 7)
    assert _lib._fast == {}
    assert _lib.fast(("rms_norm", torch.bfloat16), (), (), 0) is False


def test_unlearned_key_is_not_called(module_fake):
    assert _lib.fast(("rms_norm", torch.float16), (t(1, 8),), (), 0) is False
    assert module_fake.calls == []


def test_engram_gate_shared_value_takes_the_checked_path(module_fake):
    """A v of fewer rows than h ([1, H]: one value row for all rows) matches the kernel's
    [MV, H] pattern, so `_C.call` could not tell it from h's shape: the guard keeps it on the
    checked path, which passes its row count, and it does not learn from such a call."""
    h, k, v, w_h, w_k = _engram_inputs()
    tileaot.engram_gate(h, k, v[:1].clone(), w_h, w_k)
    assert _lib._fast == {}
    tileaot.engram_gate(h, k, v, w_h, w_k)  # learns
    tileaot.engram_gate(h, k, v[:1].clone(), w_h, w_k)
    assert len(module_fake.launches) == 3 and module_fake.calls == []
    assert module_fake.launches[2][4][4] == 1  # v's rows
