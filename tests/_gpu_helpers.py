"""Helpers shared by the GPU test files (tests/test_gpu*.py)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field


def runs_on(variant_arch: str, device_arch: str) -> bool:
    """The runtime's rule (tileaot._arch): an 'a' target runs on its exact SM only; a plain or
    family ('f') target on the same major with a lower or equal minor; PTX (compute_80) on any
    device of its compute capability or newer, unless TILEAOT_PTX=off."""
    import os

    from tileaot import _arch

    mode = _arch.ptx_mode(os.environ.get("TILEAOT_PTX"))
    return _arch.target(variant_arch).runs_on(*_arch.parse_device(device_arch), mode)


def unexercised(native, ops: Iterable[str], seen: set[str]) -> tuple[str, list[str]]:
    """(device arch, the variants of `ops` that would run on device 0 but are not in `seen`)."""
    ops = set(ops)
    arch = native.device_arch(0)
    runnable = {v["name"] for v in native.variants() if v["op"] in ops and runs_on(v["arch"], arch)}
    return arch, sorted(runnable - seen)


# Under compute-sanitizer (scripts/sanitize.sh exports TILEAOT_SANITIZE=1) a test's tensors and
# the sanitizer's per-allocation bookkeeping share the GPU with a second sanitized file
# (SANITIZE_JOBS), and the caching allocator is off: the largest cases (float64 references of
# 10^8 elements) ran the H200 out of memory on 2026-12-04. They run in the plain suite.
SANITIZE_ELEMENTS = 1 << 25


def skip_big_under_sanitizer(elements: int) -> None:
    """Skip the calling test under compute-sanitizer if its inputs hold more than
    SANITIZE_ELEMENTS elements; a no-op otherwise."""
    import os

    import pytest

    if os.environ.get("TILEAOT_SANITIZE") == "1" and elements > SANITIZE_ELEMENTS:
        pytest.skip(
            f"{elements} elements: too large under compute-sanitizer (the plain run has it)"
        )


@contextmanager
def behind_a_busy_stream(cycles: int = 200_000_000):
    """Run the block on a new side stream whose queue starts with ``cycles`` of GPU sleep
    (~0.1 s on an H200), then wait for that stream.

    The stream-order tests write their inputs inside the block: those writes land only after
    the sleep, so a launch that ignored the caller's current stream would read the inputs'
    earlier (poisoned) content and the test's comparison fails."""
    import torch

    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(cycles)
        yield side
    side.synchronize()


def _passes(check: Callable, got) -> bool:
    """`check(got)` holds: it returned True or None without an AssertionError."""
    try:
        ok = check(got)
    except AssertionError:
        return False
    return ok is None or bool(ok)


def assert_ordered_on_callers_stream(
    call: Callable, check: Callable, *sources, poison: float | tuple = float("nan")
) -> None:
    """The stream-order test of a GPU test file: `call` must launch on the caller's current
    stream.

    Each of `sources` (the op's inputs) gets a twin filled with `poison` (one value, or one per
    source). On a side stream behind a long sleep (`behind_a_busy_stream`) the twins are
    overwritten with `sources` and `call(*twins)` launched; `check(result)` (True/None, or an
    assert) must then hold. A launch on any other stream would run during the sleep and read
    the poison. So that the test can fail, `check` is first run on `call` of the still-poisoned
    twins and must not hold there."""
    import torch

    poisons = poison if isinstance(poison, tuple) else (poison,) * len(sources)
    assert len(poisons) == len(sources), "one poison value per source"

    def twins():
        return [torch.full_like(src, p) for src, p in zip(sources, poisons, strict=True)]

    control = call(*twins())
    torch.cuda.synchronize()
    assert not _passes(check, control), "the check also passes on the poisoned inputs"
    inputs = twins()
    with behind_a_busy_stream():
        for twin, src in zip(inputs, sources, strict=True):
            twin.copy_(src)
        got = call(*inputs)
    ok = check(got)
    assert ok is None or ok, "the launch did not see the inputs written on the caller's stream"


def assert_every_variant_exercised(ops: Iterable[str], seen: set[str]) -> None:
    """Each GPU test file ends with this: every built variant of its ops that runs on this GPU
    was served to at least one test (so none ships untested)."""
    from tileaot import _lib

    arch, missing = unexercised(_lib.native(), ops, seen)
    assert not missing, f"variants never exercised on {arch}: {missing}"


def tf32(x):
    """float32 `x` rounded to TF32 as TileKernels' ``round_to_tf32`` (bits + 0x1000) with the
    13 low bits cleared: the operand values of the mHC norm_fn kernels' tensor-core products."""
    import torch

    return ((x.contiguous().view(torch.int32) + 0x1000) & -8192).view(torch.float32)


def selected(op: str, key: str, shapes: Iterable[tuple[int, ...]]) -> str:
    """The variant the runtime serves for a call of (`op`, `key`) with these tensor shapes."""
    from tileaot import _lib

    native = _lib.native()
    flat = tuple(d for s in shapes for d in s)
    return native.select(native.lookup(op, key), 0, flat)


@dataclass
class RowCast:
    """The GPU-test harness of a cast to (q, scale) (per_channel_cast_fp8, per_block_cast_fp8,
    per_token_cast_e5m6): poisoned outputs, the variant served, bit-exact comparison with
    `kernels_py.quant.<op>.reference`. Each test file keeps its inputs and its op's own tests."""

    op: str
    shapes: Callable[[int, int], tuple[tuple[int, int], tuple[int, int]]]  # (M, N) -> q, scale
    q_dtype: object  # the torch dtype q is viewed as
    seen: set[str] = field(default_factory=set)

    def reference(self, x, round_sf: bool = False):
        module = importlib.import_module(f"kernels_py.quant.{self.op}")
        return module.reference(x, round_sf=round_sf)

    def run(self, x, key: str, round_sf: bool = False):
        """(q, scale, variant) of an `out=` call into poisoned outputs (0xFF bytes: an e4m3 NaN;
        NaN scales), synchronised."""
        import tileaot
        import torch

        q_shape, scale_shape = self.shapes(*x.shape)
        q = torch.full(q_shape, 0xFF, dtype=torch.uint8, device="cuda").view(self.q_dtype)
        scale = torch.full(scale_shape, float("nan"), device="cuda")
        name = selected(self.op, key, [tuple(x.shape), q_shape, scale_shape])
        self.seen.add(name)
        got = getattr(tileaot, self.op)(x, round_sf=round_sf, out=(q, scale))
        assert got[0] is q and got[1] is scale
        torch.cuda.synchronize()
        return q, scale, name

    def differences(self, q, scale, x, round_sf: bool = False) -> tuple[bool, int]:
        """(scales bit for bit the reference's, how many q bytes differ from it)."""
        import torch

        q_ref, scale_ref = self.reference(x, round_sf)
        same_scale = torch.equal(scale.view(torch.int32), scale_ref.view(torch.int32))
        return same_scale, int((q.view(torch.uint8) != q_ref.view(torch.uint8)).sum())

    def exact(self, q, scale, x, round_sf: bool = False) -> bool:
        return self.differences(q, scale, x, round_sf) == (True, 0)

    def assert_exact(self, q, scale, x, round_sf: bool = False, name: str = "") -> None:
        same_scale, mismatch = self.differences(q, scale, x, round_sf)
        assert same_scale, f"{name}: scales differ"
        assert mismatch == 0, f"{name}: {mismatch} q bytes differ"

    def check_case(self, x, key: str, round_sf: bool) -> None:
        """One parametrised case: an `out=` call, bit-exact."""
        q, scale, name = self.run(x, key, round_sf)
        self.assert_exact(q, scale, x, round_sf, name)

    def check_allocating_call(self, x, round_sf: bool) -> None:
        """The allocating call: dtypes and shapes of the outputs, bit-exact values."""
        import tileaot
        import torch

        q, scale = getattr(tileaot, self.op)(x, round_sf=round_sf)
        q_shape, scale_shape = self.shapes(*x.shape)
        assert q.dtype == self.q_dtype and scale.dtype == torch.float32
        assert q.shape == q_shape and scale.shape == scale_shape
        self.assert_exact(q, scale, x, round_sf, "allocating call")

    def check_stream_order(self, src) -> None:
        """`assert_ordered_on_callers_stream` for this cast of `src` (poisoned with NaN)."""
        import tileaot

        call = getattr(tileaot, self.op)
        assert_ordered_on_callers_stream(call, lambda got: self.exact(*got, src), src)


# (tokens, R, H) of the mHC ops' GPU tests: the 16-byte path (H % 8 == 0) at the model sizes,
# the element path (odd H), R in {1, 2, 3, 4, 8}, odd token counts.
MHC_CASES = [
    (1, 4, 7168),
    (37, 4, 2048),
    (4097, 4, 4096),
    (33, 8, 7168),
    (5, 1, 8),
    (7, 3, 1000),
    (9, 4, 1001),
    (3, 2, 1),
    (129, 8, 4095),
]
