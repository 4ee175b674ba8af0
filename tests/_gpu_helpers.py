"""Helpers shared by the GPU test files (tests/test_gpu*.py)."""

from __future__ import annotations

from collections.abc import Iterable


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
