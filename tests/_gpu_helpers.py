"""Helpers shared by the GPU test files (tests/test_gpu*.py)."""

from __future__ import annotations

from collections.abc import Iterable


def runs_on(variant_arch: str, device_arch: str) -> bool:
    """The runtime's rule: an 'a' target runs on its exact SM only; a plain target on the same
    major with a lower or equal minor."""

    def parts(arch: str) -> tuple[int, int, bool]:
        digits = arch[3:].rstrip("a")
        return int(digits[:-1]), int(digits[-1]), arch.endswith("a")

    vmaj, vmin, specific = parts(variant_arch)
    dmaj, dmin, _ = parts(device_arch)
    return vmaj == dmaj and (vmin == dmin if specific else vmin <= dmin)


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
