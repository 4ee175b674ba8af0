"""Helpers shared by the GPU test files (tests/test_gpu*.py)."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import contextmanager


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


def assert_every_variant_exercised(ops: Iterable[str], seen: set[str]) -> None:
    """Each GPU test file ends with this: every built variant of its ops that runs on this GPU
    was served to at least one test (so none ships untested)."""
    from tileaot import _lib

    arch, missing = unexercised(_lib.native(), ops, seen)
    assert not missing, f"variants never exercised on {arch}: {missing}"


def selected(op: str, key: str, shapes: Iterable[tuple[int, ...]]) -> str:
    """The variant the runtime serves for a call of (`op`, `key`) with these tensor shapes."""
    from tileaot import _lib

    native = _lib.native()
    flat = tuple(d for s in shapes for d in s)
    return native.select(native.lookup(op, key), 0, flat)


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
