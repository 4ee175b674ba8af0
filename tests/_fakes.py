"""Shared CPU-test fixtures for the Python layer: a recording fake of `tileaot._C` and
"CPU tensors count as CUDA" (the same scheme as tests/test_python_api.py, importable by
per-op test files: ``from _fakes import FakeC, Launch, STREAM, cpu_as_cuda, fake, ...``;
importing a fixture into a test module is what makes pytest use it there).

* `fake` puts a recording stand-in for `tileaot._C` into `tileaot._lib._native` (the loader's
  cache), empties the handle cache and stubs `_lib.current_stream`. It records every `lookup`
  and `launch`; it never dereferences a pointer.
* `cpu_as_cuda` replaces `_validate.device_index`, the one check that insists on CUDA memory,
  so CPU tensors count as CUDA device 0 and meta tensors (shapes without memory, for sizes
  past int32) as device 1. Every other check runs for real on real tensors.
"""

from __future__ import annotations

import importlib
import math
import re
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

try:
    import tileaot
except ImportError:  # a source checkout: test the package in python/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import tileaot

_lib = importlib.import_module("tileaot._lib")
_validate = importlib.import_module("tileaot._validate")
STREAM = 0x5EED

__all__ = [
    "STREAM",
    "FakeC",
    "Launch",
    "cpu_as_cuda",
    "fake",
    "meta",
    "misaligned",
    "new_empty_calls",
    "out_refusals",
    "refusals_test",
    "t",
    "tileaot",
]


@dataclass
class Launch:
    handle: int
    device: int
    stream: int
    ptrs: tuple
    shapes: tuple
    scalars: tuple


class FakeC:
    """Records calls the way `tileaot._C` would receive them."""

    __file__ = "<fake _C>"

    class VariantMissError(LookupError):
        pass

    class DriverError(RuntimeError):
        pass

    def __init__(self, arch: str | None = None, missing: tuple = ()) -> None:
        self.arch = arch
        self.missing = set(missing)  # (op, key) pairs lookup() rejects
        self.lookups: list[tuple[str, str]] = []
        self.launches: list[Launch] = []
        self.selects: list[tuple] = []
        self.by_handle: dict[int, tuple[str, str]] = {}

    def lookup(self, op: str, key: str) -> int:
        self.lookups.append((op, key))
        if (op, key) in self.missing:
            raise self.VariantMissError(f"tileaot: no variant of {op} for key {key}")
        handle = 1000 + len(self.lookups)
        self.by_handle[handle] = (op, key)
        return handle

    def launch(self, handle, device, stream, ptrs, shapes, scalars) -> None:
        self.launches.append(Launch(handle, device, stream, ptrs, shapes, scalars))

    def select(self, handle: int, device: int, shapes: tuple) -> str:
        op, key = self.by_handle[handle]
        self.selects.append((op, key, device, shapes))
        if key == "fp16":
            raise self.VariantMissError(f"no variant of {op} for {key} on {self.arch}\nmore")
        return f"{op}_{key.replace(',', '_')}_any"

    def device_arch(self, device: int) -> str | None:
        if self.arch is None:
            raise self.DriverError("CUDA driver not found (libcuda.so.1)")
        return self.arch

    def build_archs(self) -> str:
        return "sm_80,sm_90a"

    def build_ops(self) -> str:
        return "*"

    def variants(self) -> list[dict]:
        rows = [
            ("rms_norm", "bf16", "n4096", "sm_90a"),
            ("rms_norm", "bf16", "any", "sm_90a"),
            ("rms_norm", "bf16", "any", "sm_80"),
            ("rms_norm", "fp16", "any", "sm_80"),
            ("per_token_cast_fp8", "bf16,g128", "any", "sm_90a"),
            ("topk", "fp32", "any", "sm_80"),
        ]
        return [
            dict(name=f"{o}_{k}_{s}", op=o, key=k, spec=s, arch=a, signature="", blob_arch=a)
            for o, k, s, a in rows
        ]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeC:
    c = FakeC()
    monkeypatch.setattr(_lib, "_native", c)
    monkeypatch.setattr(_lib, "_handles", {})
    monkeypatch.setattr(_lib, "_fast", {})
    monkeypatch.setattr(_lib, "current_stream", lambda device: STREAM)
    return c


@pytest.fixture
def cpu_as_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    devices = {"cpu": 0, "meta": 1}

    def device_index(name: str, tensor: torch.Tensor) -> int:
        return devices[tensor.device.type]

    monkeypatch.setattr(_validate, "device_index", device_index)


def t(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """A random CPU tensor (integers for integer dtypes)."""
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(-1, 8, shape, dtype=dtype)


def misaligned(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """A contiguous view starting one element past an aligned allocation."""
    n = math.prod(shape)
    return torch.zeros(n + 16, dtype=dtype)[1 : n + 1].view(shape)


def new_empty_calls(monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """Every tensor `Tensor.new_empty` makes from now on, in order: how a test gets hold of
    the workspace a wrapper allocates for its scratch."""
    made: list[torch.Tensor] = []
    real = torch.Tensor.new_empty

    def new_empty(self, *args, **kwargs):
        made.append(real(self, *args, **kwargs))
        return made[-1]

    monkeypatch.setattr(torch.Tensor, "new_empty", new_empty)
    return made


def meta(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def refusals_test(cases: list[tuple], on_cpu: Collection[str] = ()):
    """A parametrised test over bad calls, for a test module to bind to a ``test_`` name: each
    case ``(call, exception type, message regex)``, or ``(id, call, exception type, message
    regex)`` to name it, must raise that exception with a one-line message matching the regex
    (a user's mistake gets a line naming the input, never a traceback's worth), before any
    kernel lookup or launch. The module must import the `fake` and `cpu_as_cuda` fixtures
    (their names are how pytest finds them). Cases whose id is in `on_cpu` run without
    `cpu_as_cuda`: their CPU tensors must be refused as such."""
    named = all(len(c) == 4 for c in cases)
    ids = [c[0] for c in cases] if named else None
    assert named or not on_cpu, "on_cpu names cases by id"
    unknown = set(on_cpu) - set(ids or ())
    assert not unknown, f"on_cpu names no case: {sorted(unknown)}"
    params = [(*c[-3:], not named or c[0] not in on_cpu) for c in cases]

    @pytest.mark.parametrize(("call", "exc", "message", "as_cuda"), params, ids=ids)
    def test(call, exc, message, as_cuda, fake, request):
        if as_cuda:
            request.getfixturevalue("cpu_as_cuda")
        with pytest.raises(exc, match=message) as info:
            call()
        assert "\n" not in str(info.value), f"a multi-line message: {info.value}"
        assert fake.launches == [] and fake.lookups == []

    return test


_OTHER_DTYPE = {torch.int8: torch.int16}  # a dtype no output has, per expected dtype


def out_refusals(schema: Any, call: Callable[[Any], Any], outs: Any, tag: str = "out") -> list:
    """Bad ``out=`` cases for `refusals_test`, derived from `schema` (an `OpSchema`): for each
    public output, in the schema's order and under the label its messages use (``out``, or
    ``out[i] (name)``), one case per rule of the schema's `out=` check: a wrong dtype, a wrong
    shape, another device, not contiguous, not 16-byte aligned. `call(out)` makes an otherwise
    valid call with that ``out=``; `outs` is a valid ``out=`` for it (a tensor, or the tuple),
    whose shapes and dtypes are the messages' "this call writes". Case ids are
    ``{tag}-{name}-{rule}``."""
    names = [t.name for t in schema.public_outs()]
    good = (outs,) if len(names) == 1 else tuple(outs)
    assert len(good) == len(names), f"{schema.op} writes {names}; got {len(good)} outputs"
    cases = []
    for i, (name, ok) in enumerate(zip(names, good, strict=True)):
        label = "out" if len(names) == 1 else f"out[{i}] ({name})"
        shape, dtype = tuple(ok.shape), ok.dtype
        wrong_dtype = _OTHER_DTYPE.get(dtype, torch.int8)
        longer = (*shape[:-1], shape[-1] + 1) if shape else (2,)
        strided = torch.zeros((*shape, 2), dtype=dtype)[..., 0]
        bad = {
            "dtype": (
                torch.zeros(shape, dtype=wrong_dtype),
                TypeError,
                f" has dtype {wrong_dtype}; this call writes {dtype}",
            ),
            "shape": (
                torch.zeros(longer, dtype=dtype),
                ValueError,
                f" has shape {longer}; this call writes {shape}",
            ),
            "device": (meta(*shape, dtype=dtype), ValueError, " is on meta, but the inputs"),
            "strided": (strided, ValueError, " is not contiguous"),
            "misaligned": (misaligned(*shape, dtype=dtype), ValueError, "'s data pointer"),
        }
        for rule, (tensor, exc, message) in bad.items():
            if rule == "strided" and math.prod(shape) <= 1:
                continue  # one element: contiguous whatever its strides
            given = tensor if len(names) == 1 else (*good[:i], tensor, *good[i + 1 :])
            regex = "^" + re.escape(label + message)
            cases.append((f"{tag}-{name}-{rule}", lambda given=given: call(given), exc, regex))
    return cases
