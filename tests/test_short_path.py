"""The ops' short path (`_lib.fast` → `_C.call`) passes exactly what the checked path launched.

CPU tests with a module-typed fake of `tileaot._C` (`_lib.learn` only trusts a real module, so
the recording fakes of _fakes.py never see the short path). For each op that has one: a first
call runs the checked path and records its `launch`; a second, identical call must go through
`call`, with tensors whose data pointers are the launch's pointers and whose shapes,
concatenated, are the launch's shape values, the same scalars, and the output bits set on
exactly the tensors the op writes. A short path that passed other shapes (a flattened view, a
scale layout) would launch the right kernel on the wrong sizes; this is where that shows.
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

    def lookup(op: str, key: str) -> int:
        return native.handles.setdefault((op, key), 100 + len(native.handles))

    def launch(handle, device, stream, ptrs, shapes, scalars):
        native.launches.append((handle, device, stream, tuple(ptrs), tuple(shapes), scalars))

    def call(handle, tensors, scalars, outputs=0):
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


# op name, argument builder (fresh tensors, out= given), index of each written tensor in the
# call's tensor tuple.
CASES = {
    "rms_norm": (
        lambda: ((t(7, 4096), t(4096)), {"eps": 1e-5, "out": t(7, 4096)}),
        {2},
    ),
    "swiglu": (lambda: ((t(5, 2 * 2048),), {"out": t(5, 2048)}), {1}),
    "gemm": (lambda: ((t(9, 64), t(32, 64)), {"out": t(9, 32)}), {2}),
    "topk_gate": (
        lambda: (
            (_f32(11, 256), 8),
            {"out": (torch.empty(11, 8, dtype=torch.int32), _f32(11, 8))},
        ),
        {1, 2},
    ),
    "sinkhorn_normalize": (
        lambda: ((_f32(6, 4, 4),), {"repeat": 3, "eps": 1e-6, "out": _f32(6, 4, 4)}),
        {1},
    ),
    "per_token_cast_fp8": (
        lambda: (
            (t(13, 512),),
            {"out": (torch.empty(13, 512, dtype=torch.float8_e4m3fn), _f32(13, 4))},
        ),
        {1, 2},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_second_call_passes_what_the_first_launched(module_fake, name):
    build, written = CASES[name]
    args, kwargs = build()
    op = getattr(tileaot, name)
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
    assert {i for i in range(len(tensors)) if outputs >> i & 1} == written


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocating_call_passes_fresh_outputs_of_the_launched_shapes(module_fake, name):
    build, written = CASES[name]
    args, kwargs = build()
    kwargs.pop("out")
    op = getattr(tileaot, name)
    op(*args, **kwargs)
    shapes = module_fake.launches[0][4]
    result = op(*args, **kwargs)
    assert len(module_fake.launches) == 1
    tensors = module_fake.calls[0][1]
    assert tuple(d for x in tensors for d in x.shape) == shapes
    results = result if isinstance(result, tuple) else (result,)
    assert [tensors[i] for i in sorted(written)] == list(results)


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
