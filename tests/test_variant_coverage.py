"""The GPU test files' shared check (tests/_gpu_helpers.py), on the CPU with a stand-in module."""

from __future__ import annotations

import pytest
from _gpu_helpers import runs_on, unexercised


class _Native:
    def __init__(self, arch: str, variants: list[tuple[str, str, str]]):
        self._arch = arch
        self._variants = [{"op": o, "name": n, "arch": a} for o, n, a in variants]

    def device_arch(self, device: int) -> str:
        return self._arch

    def variants(self) -> list[dict]:
        return self._variants


@pytest.mark.parametrize(
    "variant,device,expected",
    [
        ("sm_90a", "sm_90a", True),
        ("sm_90a", "sm_100a", False),
        ("sm_80", "sm_89", True),
        ("sm_86", "sm_80", False),
        ("sm_75", "sm_80", False),
        ("sm_100a", "sm_100a", True),
        ("sm_100f", "sm_103", True),
        ("sm_100f", "sm_120", False),
        ("sm_120f", "sm_121", True),
        ("compute_80", "sm_110", True),
        ("compute_80", "sm_75", False),
    ],
)
def test_runs_on_follows_the_runtime_rule(variant, device, expected):
    assert runs_on(variant, device) is expected


def test_unexercised_lists_only_runnable_variants_of_the_ops():
    native = _Native(
        "sm_90a",
        [
            ("rms_norm", "rms_norm_bf16_any", "sm_90a"),
            ("rms_norm", "rms_norm_bf16_any", "sm_80"),  # not runnable on sm_90a
            ("rms_norm", "rms_norm_bf16_n4096", "sm_90a"),
            ("gemm", "gemm_bf16_any", "sm_90a"),  # another op
        ],
    )
    assert unexercised(native, ("rms_norm",), {"rms_norm_bf16_any"}) == (
        "sm_90a",
        ["rms_norm_bf16_n4096"],
    )
    assert unexercised(native, ("rms_norm",), {"rms_norm_bf16_any", "rms_norm_bf16_n4096"})[1] == []
