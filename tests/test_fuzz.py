"""Fuzzing every public op's argument checks with hypothesis (DESIGN.md "Must hold" 7).

For each op, each example draws a valid call (tests/_fuzz_calls.py), then

* makes it: it returns outputs of the documented shapes and dtypes (the `out` tensors
  themselves when given) and launches exactly when there is something to write, with every
  size below 2**31 and the caller's own tensors' pointers;
* breaks it in every way that applies, one at a time: a tensor replaced by a non-tensor, given
  another dtype or rank, a tied dim changed, a strided, misaligned or other-device view, an
  `out=` overlapping another tensor, each refused scalar, a short `out=` tuple. Each must raise
  TypeError or ValueError naming that argument (or the `out=` it no longer fits), before any
  native lookup or launch.

Other examples build the call from meta tensors whose sizes may pass 2**31: refused with a
message about 2**31 exactly when some tensor, given or returned, has a dim or element count
>= 2**31, else made like a valid call.

On the CPU the native module is the recording fake of tests/_fakes.py, and the one check that
insists on CUDA memory, `_validate.device_index`, is patched (`cpu_as_cuda`): CPU tensors count
as CUDA device 0, meta tensors as device 1. Everything else runs for real. Another test shows
that, unpatched, CPU tensors are refused. On a GPU (`gpu` tests) the real native module runs
behind a recorder, valid calls are checked against the kernels_py references, and CPU tensors
play the other device.

Hypothesis runs derandomized (a fixed seed per test, no example database), so CI sees the same
cases every run.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import os
import re
import sys
from collections import Counter
from typing import Any

import pytest

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")

from _fakes import cpu_as_cuda, fake, tileaot  # noqa: E402
from _fuzz_calls import BUILDERS, NATIVE_OP, NEEDS, PUBLIC_OP, Call, Draw  # noqa: E402
from _recording import recording  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

_lib = importlib.import_module("tileaot._lib")
LIMIT = 2**31
# Examples per op and run. Each checks one valid call and every way of breaking it (~25 calls),
# so 50 make ~24,000 checked calls over the 17 ops (issue 7 asks >= 1,000) in ~10 s on one
# core. Digging deeper: TILEAOT_FUZZ_EXAMPLES=300, and TILEAOT_FUZZ_SEED=<n> for other cases
# than CI's fixed ones. scripts/sanitize.sh shortens the GPU run.
EXAMPLES = int(os.environ.get("TILEAOT_FUZZ_EXAMPLES", "50"))
HUGE_EXAMPLES = 15
GPU_EXAMPLES = int(os.environ.get("TILEAOT_FUZZ_GPU_EXAMPLES", "10"))
SEED = os.environ.get("TILEAOT_FUZZ_SEED")
DTYPE_POOL = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.complex64,
)


def _fuzz(n: int) -> Any:
    """`given` with our settings: derandomized (unless TILEAOT_FUZZ_SEED), no database."""

    def wrap(fn: Any) -> Any:
        fn = settings(
            max_examples=n,
            derandomize=SEED is None,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )(given(st.data())(fn))
        return fn if SEED is None else seed(int(SEED))(fn)

    return wrap


def _available() -> list[str]:
    """Builders whose op this checkout has (FP4 ops may be absent)."""
    return [n for n in BUILDERS if n not in NEEDS or importlib.util.find_spec(NEEDS[n])]


def _op(name: str) -> Any:
    return getattr(tileaot, PUBLIC_OP.get(name, name))


# ---------------------------------------------------------------- arguments by path
def _get(args: dict, path: tuple) -> Any:
    value = args[path[0]]
    return value[path[1]] if len(path) > 1 else value


def _set(args: dict, path: tuple, value: Any) -> dict:
    args = dict(args)
    if len(path) == 1:
        args[path[0]] = value
    else:
        items = list(args[path[0]])
        items[path[1]] = value
        args[path[0]] = tuple(items)
    return args


def _names(name: str) -> str:
    """A regex for `name` as a whole word ("x" must not match inside "idx" or "x_scale")."""
    return rf"(?<!\w){re.escape(name)}(?!\w)"


# ---------------------------------------------------------------- breaking one thing
def _mutations(call: Call, other_device: str) -> list[tuple]:
    """Every (kind, target) that makes `call` invalid."""
    inputs = [p for p in call.slots if p[0] != "out"]
    found: list[tuple] = []
    for path, slot in call.slots.items():
        t = _get(call.args, path)
        found.append(("type", path))
        found.append(("dtype", path))
        found += [("rank", path)] if slot.fixed_rank else []
        found += [("dim", path, dim) for dim in slot.bound]
        found += [("strided", path)] if t.numel() > 1 else []
        found += [("misaligned", path)] if t.numel() else []
        # Which of two disagreeing tensors a message blames is a matter of order: move a tensor
        # that is checked against another input, or an output (checked against the inputs).
        if other_device == "cpu" or path[0] == "out" or len(inputs) > 1:
            found.append(("device", path))
        if path[0] == "out" and t.numel():
            for other, o_slot in call.slots.items():
                if other != path and not o_slot.unused and _get(call.args, other).numel():
                    found.append(("overlap", path, other))
    found += [("scalar", name, i) for name, values in call.bad.items() for i in range(len(values))]
    if isinstance(call.args.get("out"), tuple):
        found.append(("container",))
    return found


def _break(d: Draw, call: Call, mutation: tuple, other_device: str) -> tuple[dict, str]:
    """The arguments with `mutation` applied, and a regex for the name the error must use."""
    kind, *target = mutation
    if kind == "scalar":
        name, i = target
        return _set(call.args, (name,), call.bad[name][i]), _names(name)
    if kind == "container":
        return _set(call.args, ("out",), call.args["out"][:-1]), _names("out")
    path = target[0]
    slot, t = call.slots[path], _get(call.args, path)
    if kind == "overlap":
        return _overlap(d, call.args, path, target[1]), _names(slot.name)
    pattern = _names(slot.name)
    if kind in ("dtype", "dim", "rank") and path[0] != "out":  # it may be out= that no longer fits
        outs = [_names(s.name) for p, s in call.slots.items() if p[0] == "out"]
        pattern = "|".join([pattern, *outs])
    return _set(call.args, path, _broken(d, t, slot, kind, target, other_device)), pattern


def _broken(d: Draw, t: Any, slot: Any, kind: str, target: list, other_device: str) -> Any:
    shape, dtype, dev = tuple(t.shape), t.dtype, t.device
    if kind == "type":
        return d.pick([3, [[1.0]], "x"] + ([] if slot.optional else [None]))
    if kind == "dtype":
        new = d.pick([x for x in DTYPE_POOL if x not in slot.dtypes])
        return torch.zeros(shape, dtype=new, device=dev)
    if kind == "rank":
        new = d.pick([(1, *shape)] + ([shape[1:]] if shape else []))
        return torch.zeros(new, dtype=dtype, device=dev)
    if kind == "dim":
        dim = target[1]
        value = d.pick([v for v in (shape[dim] + 1, shape[dim] - 1, shape[dim] + 7) if v >= 0])
        return torch.zeros(shape[:dim] + (value,) + shape[dim + 1 :], dtype=dtype, device=dev)
    if kind == "strided":
        dim = d.pick([i for i, s in enumerate(shape) if s > 1])
        wide = shape[:dim] + (2 * shape[dim],) + shape[dim + 1 :]
        view = torch.zeros(wide, dtype=dtype, device=dev).narrow(dim, 0, 2 * shape[dim])
        view = view[(slice(None),) * dim + (slice(None, None, 2),)]
        assert view.shape == shape and not view.is_contiguous()
        return view
    if kind == "misaligned":  # one element past an aligned allocation (elements are < 16 B)
        n = math.prod(shape)
        return torch.zeros(n + 16, dtype=dtype, device=dev)[1 : n + 1].view(shape)
    assert kind == "device", kind
    return torch.zeros(shape, dtype=dtype, device=other_device)


def _overlap(d: Draw, args: dict, out_path: tuple, other_path: tuple) -> dict:
    """Places the other tensor and the output in one buffer, the output starting inside it."""
    out, other = _get(args, out_path), _get(args, other_path)
    offset = 16 * d.int(0, (other.nbytes - 1) // 16)
    buf = torch.zeros(max(other.nbytes, offset + out.nbytes), dtype=torch.uint8, device=out.device)
    other_view = buf[: other.nbytes].view(other.dtype).view(other.shape)
    out_view = buf[offset : offset + out.nbytes].view(out.dtype).view(out.shape)
    return _set(_set(args, other_path, other_view), out_path, out_view)


# ---------------------------------------------------------------- what must hold
def _flat(result: Any) -> list:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _too_big(call: Call) -> bool:
    shapes = [tuple(_get(call.args, p).shape) for p in call.slots]
    shapes += [tuple(r[0]) for r in call.returns if r is not None]
    return any(max(s, default=0) >= LIMIT or math.prod(s) >= LIMIT for s in shapes)


def _check_valid(call: Call, result: Any, rec: Any, device: int) -> None:
    got = _flat(result)
    want = [None if r is None else (tuple(r[0]), r[1]) for r in call.returns]
    assert [None if g is None else (tuple(g.shape), g.dtype) for g in got] == want
    out = call.args.get("out")
    if out is not None:
        for given, returned in zip(_flat(out), got, strict=False):
            assert returned is given, "out= given, but another tensor was returned"
    assert bool(rec.launches) == call.launches, f"launched {len(rec.launches)} kernels"
    for launch in rec.launches:
        assert (launch.device, type(launch.handle)) == (device, int)
        assert all(type(v) is int and 0 <= v < LIMIT for v in launch.shapes), launch.shapes
        assert all(type(p) is int for p in launch.ptrs)
        assert all(type(s) in (int, float) for s in launch.scalars), launch.scalars
    if call.launches and device != "meta":
        passed = {p for launch in rec.launches for p in launch.ptrs}
        tensors = [_get(call.args, p) for p, s in call.slots.items() if not s.unused] + got
        for t in tensors:
            if t is not None and t.numel() and t.device.type != "meta":
                assert t.data_ptr() in passed, "a kernel did not get the caller's tensor"


def _expect_refused(fn: Any, args: dict, pattern: str, rec: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        fn(**args)
    assert re.search(pattern, str(info.value)), f"{pattern!r} not in: {info.value}"
    assert rec.launches == [] and rec.lookups == [], "refused after a native call"


def _valid_and_broken(data: Any, rec: Any, name: str, devices: tuple, seen: Counter) -> None:
    """One example: a valid call of op `name`, checked, then every way of breaking it one thing
    at a time. `devices`: where the tensors live, and the device that counts as another one."""
    device, other_device = devices
    torch.manual_seed(data.draw(st.integers(0, 2**16)))
    d = Draw(data, device)
    call = BUILDERS[name](d)
    fn = _op(name)
    _reset(rec)
    result = fn(**call.args)
    _check_valid(call, result, rec, torch.device(device).index or 0)
    if device != "cpu" and call.launches:  # the references need something to compute
        torch.cuda.synchronize()
        call.check(result)
    seen["valid"] += 1
    for mutation in _mutations(call, other_device):
        _reset(rec)
        args, pattern = _break(d, call, mutation, other_device)
        _expect_refused(fn, args, pattern, rec)
        seen[mutation[0]] += 1


def _huge(data: Any, rec: Any, name: str, seen: Counter) -> None:
    """One example: a call of op `name` on meta tensors whose sizes may pass 2**31."""
    call = BUILDERS[name](Draw(data, "cpu", huge=True))
    fn = _op(name)
    _reset(rec)
    if _too_big(call):
        _expect_refused(fn, call.args, r"2\*\*31|32-bit", rec)
        seen["refused"] += 1
    else:
        _check_valid(call, fn(**call.args), rec, 1)
        seen["valid"] += 1


def _reset(rec: Any) -> None:
    rec.launches.clear()
    rec.lookups.clear()
    _lib._handles.clear()


# ---------------------------------------------------------------- the tests
@pytest.fixture
def cpu_fuzz(fake, cpu_as_cuda, monkeypatch):
    # The backward's block count asks torch for the SM count, which needs a GPU.
    bwd = importlib.import_module("tileaot.engram_gate_backward")
    monkeypatch.setattr(bwd, "_sm_count", lambda device: 132)
    return fake


@pytest.mark.parametrize("name", _available())
def test_valid_and_broken_calls(cpu_fuzz, name):
    seen: Counter = Counter()

    @_fuzz(EXAMPLES)
    def run(data):
        _valid_and_broken(data, cpu_fuzz, name, ("cpu", "meta"), seen)

    run()
    # >= 1,000 checked calls per run over all ops (issue 7), and each kind of breakage tried.
    assert seen.total() >= 100 and seen["valid"] >= EXAMPLES // 2
    assert {"type", "dtype", "strided", "misaligned"} <= set(seen), seen
    print(f"{name}: {seen.total()} calls checked, {dict(seen)}")


@pytest.mark.parametrize("name", _available())
def test_sizes_past_int32(cpu_fuzz, name):
    seen: Counter = Counter()

    @_fuzz(HUGE_EXAMPLES)
    def run(data):
        _huge(data, cpu_fuzz, name, seen)

    run()
    assert seen["refused"] >= 1


def test_every_public_op_is_fuzzed():
    # An op is a public function whose module describes a typical call for `tileaot info`.
    ops = {
        n
        for n in tileaot.__all__
        if inspect.isfunction(f := getattr(tileaot, n))
        and hasattr(sys.modules[f.__module__], "example_shapes")
    }
    assert ops == {PUBLIC_OP.get(name, name) for name in _available()}


@pytest.mark.parametrize("name", _available())
def test_cpu_tensors_are_refused_without_the_patch(fake, name):
    @_fuzz(12)
    def run(data):
        call = BUILDERS[name](Draw(data, "cpu"))
        _reset(fake)
        with pytest.raises(ValueError, match=r"is on device 'cpu'; tileaot kernels run on CUDA"):
            _op(name)(**call.args)
        assert fake.launches == [] and fake.lookups == []

    run()


@pytest.mark.gpu
@pytest.mark.parametrize("name", _available())
def test_valid_and_broken_calls_on_the_gpu(monkeypatch, name):
    rec = recording(monkeypatch)
    if NATIVE_OP.get(name, name) not in {v["op"] for v in rec.variants()}:
        pytest.skip(f"{NATIVE_OP.get(name, name)} is not in this build")
    seen: Counter = Counter()

    @_fuzz(GPU_EXAMPLES)
    def run(data):
        _valid_and_broken(data, rec, name, ("cuda", "cpu"), seen)

    run()
    assert seen["valid"] >= GPU_EXAMPLES // 2
