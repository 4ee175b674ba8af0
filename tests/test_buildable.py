"""tileaot._buildable (the sizes a kernel can specialise, known without tracing) agrees with the
kernel factories themselves: each factory is called on a table of real models' sizes, and it
raises exactly where `why_not` says it cannot build. Needs tilelang (the factories build a
prim_func); skipped without it.
"""

from __future__ import annotations

import importlib

import pytest

_buildable = importlib.import_module("tileaot._buildable")

# Hidden and intermediate sizes of the zoo's models (examples/models) and a few edge cases.
SIZES = {
    "rms_norm": ("N", (4, 128, 256, 768, 1408, 1536, 2560, 2880, 5120, 5376, 2884)),
    "swiglu": ("H", (768, 1408, 1412, 2880, 6400)),
    "swiglu_per_token_cast_fp8": ("H", (1408, 1536, 2048, 2880, 2944)),
    "per_token_cast_fp8": ("N", (2880, 5120, 7168, 7200)),
    "topk_gate": ("E", (8, 16, 32, 60, 64, 160, 384, 512, 544)),
    "top2_sum_gate": ("E", (1, 2, 60, 160, 256, 384, 512, 513)),
    "moe_expand": ("E", (8, 60, 384, 1024, 1025)),
}


def _cases():
    for op, (axis, values) in SIZES.items():
        for value in values:
            yield op, {axis: value}


@pytest.fixture(scope="module")
def specs():
    pytest.importorskip("tilelang")
    from kernels_py import all_specs

    return {s.op: s for s in all_specs()}


@pytest.mark.parametrize("op, size", list(_cases()))
def test_why_not_is_the_factorys_verdict(op, size, specs):
    spec = specs[op]
    arch = "sm_90a"
    for key in spec.keys:
        if not spec.supports(arch, key, size):
            continue
        predicted = _buildable.why_not(op, spec.key_string(key), size)
        try:
            spec.factory(arch=arch, **key, **size)
        except ValueError as e:
            assert predicted is not None, f"{op}[{spec.key_string(key)}] {size}: factory says {e}"
            assert predicted.startswith(f"{op}: "), predicted
        else:
            assert predicted is None, f"{op}[{spec.key_string(key)}] {size}: builds, {predicted}"


def test_the_sizes_the_issue_names():
    assert _buildable.why_not("rms_norm", "bf16", {"N": 2880}) is None  # a padded row
    assert "multiple of 8" in _buildable.why_not("rms_norm", "bf16", {"N": 2884})
    assert _buildable.why_not("rms_norm", "fp32", {"N": 2884}) is None
    assert _buildable.why_not("topk_gate", "fp32,softmax", {"E": 8}) is None  # any count now
    assert "1 <= E <= 512" in _buildable.why_not("topk_gate", "fp32,softmax", {"E": 600})
    assert _buildable.why_not("topk_gate", "fp32,softmax", {"E": 384}) is None
    assert _buildable.why_not("swiglu", "bf16", {"H": 1408}) is None
    assert _buildable.why_not("gemm", "bf16", {"N": 60, "K": 2048}) is not None
    assert _buildable.why_not("moe_reduce", "bf16,bf16,weighted", {}) is None
    assert "positive integer" in _buildable.why_not("rms_norm", "bf16", {"N": 0})
