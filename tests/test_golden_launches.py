"""The golden launch record: what every public op hands the native module, call by call.

A fixed, seeded set of calls per op (the fuzz builders of tests/_fuzz_calls.py, drawn from
`random.Random(seed)` instead of hypothesis, so the set does not move with hypothesis' version)
runs against the recording fake of `tileaot._C` (tests/_fakes.py). For each valid call the record
holds every launch: the variant looked up (op, key), each pointer as (which tensor, byte offset
from its base), the flat shapes, the scalars and the stream; for each way of breaking the call
(the fuzz test's mutations) it holds the exception class and message, and the check is that the
call still raises that class with a message naming the same argument (the fuzz test's rule).
Meta-tensor calls with sizes past 2**31 are recorded whole (launches, or class and message).

The record (tests/golden_launches.json.gz) was written before the op-schema rewrite of the Python
layer (issue 16) and must stay identical through it: same launches, same errors. An op whose
contract changes on purpose (a TileKernels-parity change of its arguments) is re-recorded by
``TILEAOT_GOLDEN_WRITE=1 pytest tests/test_golden_launches.py -k <op>``, in the commit that
changes it, never to paper over a refactor.
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from _fakes import cpu_as_cuda, fake, tileaot  # noqa: E402
from _fuzz_calls import BUILDERS, NEEDS, PUBLIC_OP, Draw  # noqa: E402
from test_fuzz import _break, _get, _mutations, _reset  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

RECORD = Path(__file__).with_name("golden_launches.json.gz")
WRITE = os.environ.get("TILEAOT_GOLDEN_WRITE") == "1"
CALLS = 24  # valid calls per op (each with ~25 broken variants)
HUGE = 24  # meta-tensor calls per op


class SeededDraw(Draw):
    """The builders' `Draw`, its three random primitives driven by one `random.Random`."""

    def __init__(self, rng: random.Random, device: str, huge: bool = False) -> None:
        super().__init__(None, device, huge)
        self._rng = rng

    def pick(self, options: Any) -> Any:
        options = list(options)
        return options[self._rng.randrange(len(options))]

    def flag(self) -> bool:
        return self._rng.random() < 0.5

    def int(self, lo: int, hi: int) -> int:
        return self._rng.randint(lo, hi)


def _tensors(call: Any, result: Any) -> list:
    """The call's tensors in a fixed order: argument slots (by path), then returned tensors."""
    args = [_get(call.args, p) for p in sorted(call.slots, key=repr)]
    got = list(result) if isinstance(result, (tuple, list)) else [result]
    return [t for t in args + got if isinstance(t, torch.Tensor)]


def _pointer(ptr: int, tensors: list, unknown: dict) -> list:
    """(index of the tensor whose storage holds `ptr`, byte offset), or ("scratch", n) for memory
    the wrapper allocated itself (numbered in order of appearance)."""
    for i, t in enumerate(tensors):
        if t.device.type == "meta":
            continue
        base = t.untyped_storage().data_ptr()
        if base <= ptr < base + max(t.untyped_storage().nbytes(), 1):
            return [i, ptr - t.data_ptr()]
    return ["scratch", unknown.setdefault(ptr, len(unknown))]


def _launches(fake: Any, tensors: list) -> list:
    unknown: dict = {}
    meta = any(t.device.type == "meta" for t in tensors)
    return [
        {
            "variant": list(fake.by_handle[launch.handle]),
            "ptrs": None if meta else [_pointer(p, tensors, unknown) for p in launch.ptrs],
            "shapes": list(launch.shapes),
            "scalars": list(launch.scalars),
            "stream": launch.stream,
            "device": launch.device,
        }
        for launch in fake.launches
    ]


def _outcome(fn: Any, args: dict) -> Any:
    try:
        return ["ok", fn(**args)]
    except (TypeError, ValueError) as e:
        return [type(e).__name__, re.sub(r"0x[0-9a-f]+", "0x…", str(e))]  # addresses vary


def _record_op(name: str, fake: Any) -> dict:
    fn = getattr(tileaot, PUBLIC_OP.get(name, name))
    rng = random.Random(f"golden:{name}")
    calls, huge = [], []
    for _ in range(CALLS):
        torch.manual_seed(rng.randrange(2**16))
        d = SeededDraw(rng, "cpu")
        call = BUILDERS[name](d)
        _reset(fake)
        result = fn(**call.args)
        entry: dict = {"launches": _launches(fake, _tensors(call, result)), "broken": []}
        for mutation in _mutations(call, "meta"):
            _reset(fake)
            torch.manual_seed(0)
            args, pattern = _break(d, call, mutation, "meta")
            got = _outcome(fn, args)
            assert got[0] != "ok", f"{name}: {mutation} was accepted"
            entry["broken"].append([repr(mutation), *got, pattern])
        calls.append(entry)
    for _ in range(HUGE):
        call = BUILDERS[name](SeededDraw(rng, "cpu", huge=True))
        _reset(fake)
        kind, value = _outcome(fn, call.args)
        huge.append(_launches(fake, []) if kind == "ok" else [kind, value])
    return {"calls": calls, "huge": huge}


def _available() -> list[str]:
    return [n for n in BUILDERS if n not in NEEDS or importlib.util.find_spec(NEEDS[n])]


@pytest.fixture
def golden_fake(fake, cpu_as_cuda, monkeypatch):
    bwd = importlib.import_module("tileaot.engram_gate_backward")
    monkeypatch.setattr(bwd, "_sm_count", lambda device: 132)  # needs a GPU otherwise
    return fake


@pytest.mark.parametrize("name", _available())
def test_launches_match_the_golden_record(golden_fake, name):
    got = json.loads(json.dumps(_record_op(name, golden_fake)))  # tuples -> lists, as stored
    record = json.loads(gzip.decompress(RECORD.read_bytes())) if RECORD.exists() else {}
    if WRITE:
        for call in got["calls"]:  # patterns are recomputed from the draws when checking
            call["broken"] = [b[:3] for b in call["broken"]]
        record[name] = got
        text = json.dumps(record, sort_keys=True, separators=(",", ":"))
        RECORD.write_bytes(gzip.compress(text.encode(), mtime=0))
        return
    assert name in record, f"{name} has no golden record: TILEAOT_GOLDEN_WRITE=1 records it"
    want = record[name]
    for i, (g, w) in enumerate(zip(got["calls"], want["calls"], strict=True)):
        assert g["launches"] == w["launches"], f"{name} call {i}: launches differ"
        for (mutation, cls, msg, pattern), (w_mutation, w_cls, w_msg) in zip(
            g["broken"], w["broken"], strict=True
        ):
            # The same breakage, refused with the same exception class, naming the same argument
            # (the fuzz test's pattern); the wording may differ from the record's.
            assert mutation == w_mutation, f"{name} call {i}: the draws moved"
            why = f"{name} call {i}: {mutation} raised {cls}: {msg}; was {w_cls}: {w_msg}"
            assert cls == w_cls and re.search(pattern, msg), why
    for i, (g, w) in enumerate(zip(got["huge"], want["huge"], strict=True)):
        if w and w[0] in ("TypeError", "ValueError"):  # refused: the same class, about 2**31
            assert g[0] == w[0] and "2**31" in g[1], f"{name} huge call {i}: {g}, was {w}"
        else:
            assert g == w, f"{name} huge call {i}: launches differ"
    assert len(got["calls"]) == len(want["calls"]) == CALLS
