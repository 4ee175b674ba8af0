"""Which specialised sizes each kernel can build: its factory's own checks, without tracing.

A bring-your-shapes TOML (`python -m tileaot check --save-config`, `python -m build_tools
config/list`) may only suggest or accept sizes the kernel factory takes; otherwise the build
fails minutes later, while tracing. `why_not(op, key, spec)` answers before anything is traced,
from the same rules the factories in kernels_py/ apply (tests/test_buildable.py calls every
factory on a table of sizes and asserts the two agree, so a kernel change that moves a limit
fails there). Pure Python: the installed package has no kernels_py and no tilelang, and
build_tools loads this file by path.

`key` is the variant's key string ("bf16", "fp32,softmax", "bf16,g128"), `spec` the
specialised sizes ({"N": 2880}). An op not listed here has no extra rule beyond the sizes
being positive integers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

_ITEMSIZE = {"bf16": 2, "fp16": 2, "fp32": 4, "e4m3": 1}
FP8_GROUP = 128  # per_token_cast_fp8 / swiglu_per_token_cast_fp8 / moe_expand e4m3 group
TOPK_MAX_E = 512  # kernels_py/moe/topk_gate.py MAX_E
EXPAND_MAX_E = 1024  # kernels_py/moe/moe_expand.py E_MAX


def why_not(op: str, key: str, spec: Mapping[str, int]) -> str | None:
    """None if `op` builds a variant of `key` specialised to `spec`, else why not (one line)."""
    for name, value in spec.items():
        if type(value) is not int or value <= 0:
            return f"{op}: {name} = {value!r} must be a positive integer"
    rule = _RULES.get(op)
    return rule(key.split(","), dict(spec)) if rule is not None and spec else None


def _vec(dtype: str) -> int:
    return 16 // _ITEMSIZE.get(dtype, 2)


def _rms_norm(key: list[str], spec: dict[str, int]) -> str | None:
    """kernels_py/norm/rms_norm.py row_layout: a static N is a whole number of 16-byte vectors
    (rows whose vectors no power-of-two thread count divides are padded, not refused)."""
    n = spec.get("N")
    if n is None:
        return None
    vec = _vec(key[0])
    if n % vec:
        return f"rms_norm: a static N must be a multiple of {vec} (16 bytes); got {n}"
    return None


def _swiglu(key: list[str], spec: dict[str, int]) -> str | None:
    h, vec = spec.get("H"), _vec(key[0])
    if h is not None and h % vec:
        return f"swiglu: static H={h} must be a multiple of {vec} for {key[0]}"
    return None


def _swiglu_fp8(key: list[str], spec: dict[str, int]) -> str | None:
    h = spec.get("H")
    if h is not None and h % FP8_GROUP:
        return f"swiglu_per_token_cast_fp8: H={h} is not a multiple of {FP8_GROUP}"
    return None


def _per_token_cast_fp8(key: list[str], spec: dict[str, int]) -> str | None:
    if len(key) > 1 and key[1] != "g128":
        return f"per_token_cast_fp8: the {key[1]} mode only has a generic variant"
    n = spec.get("N")
    if n is not None and n % FP8_GROUP:
        return f"per_token_cast_fp8: N={n} is not a multiple of {FP8_GROUP}"
    return None


def _topk_gate(key: list[str], spec: dict[str, int]) -> str | None:
    e = spec.get("E")
    if e is not None and not 0 < e <= TOPK_MAX_E:  # kernels_py/moe/topk_gate.py spec_error
        return f"topk_gate: a static E must be an expert count 1 <= E <= {TOPK_MAX_E}; got {e}"
    return None


def _top2_sum_gate(key: list[str], spec: dict[str, int]) -> str | None:
    e = spec.get("E")
    if e is not None and not 2 <= e <= TOPK_MAX_E:  # kernels_py/moe/top2_sum_gate.py spec_error
        return f"top2_sum_gate: a static E must be an expert count 2 <= E <= {TOPK_MAX_E}; got {e}"
    return None


def _moe_expand(key: list[str], spec: dict[str, int]) -> str | None:
    e = spec.get("E")
    if e is not None and e > EXPAND_MAX_E:
        return f"moe_expand: E={e} is outside [1, {EXPAND_MAX_E}]"
    return None


def _gemm(key: list[str], spec: dict[str, int]) -> str | None:
    bad = [f"{d} = {spec[d]}" for d in ("N", "K") if d in spec and spec[d] % 8]
    if bad:
        return f"gemm: {', '.join(bad)} must be a multiple of 8 (16-byte rows)"
    return None


_RULES: dict[str, Callable[[list[str], dict[str, int]], str | None]] = {
    "rms_norm": _rms_norm,
    "swiglu": _swiglu,
    "swiglu_per_token_cast_fp8": _swiglu_fp8,
    "per_token_cast_fp8": _per_token_cast_fp8,
    "topk_gate": _topk_gate,
    "top2_sum_gate": _top2_sum_gate,
    "moe_expand": _moe_expand,
    "gemm": _gemm,
}
