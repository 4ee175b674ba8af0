"""What this build contains and what it would run here (`tileaot.info()`, `python -m tileaot`).

Needs the native module, never torch: it talks to `_C` with plain ints and strings.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import _lib

# Exceptions a query may raise when no GPU or driver is usable (DriverError is a RuntimeError,
# VariantMissError a LookupError).
_QUERY_ERRORS = (RuntimeError, LookupError, OSError, ValueError)


def info(device: int = 0) -> dict[str, Any]:
    """Describe this build and, if a GPU is usable, which variant each op would pick on it.

    Returns a dict: ``version``, ``native`` (path of the native module), ``archs`` (list of
    ``"sm_XX"``), ``ops`` (the ops filter the build used), ``variants`` (op -> key -> spec ->
    list of archs, in dispatch-table order), ``device`` (index), ``device_arch`` (``"sm_90a"``
    or None), ``device_error`` (why no GPU is usable, or None) and ``picks`` (one dict per
    op/key: ``op``, ``key``, ``call`` (a typical call), ``variant`` or ``error``).

    Raises ImportError if the native module is not built. Never imports torch.
    """
    native = _lib.native()
    variants: dict[str, dict[str, dict[str, list[str]]]] = {}
    for row in native.variants():
        specs = variants.setdefault(row["op"], {}).setdefault(row["key"], {})
        specs.setdefault(row["spec"], []).append(row["arch"])
    result: dict[str, Any] = {
        "version": _lib.version(),
        "native": getattr(native, "__file__", "?"),
        "archs": [a for a in native.build_archs().split(",") if a],
        "ops": native.build_ops(),
        "variants": variants,
        "device": device,
        "device_arch": None,
        "device_error": None,
        "picks": [],
    }
    try:
        arch = native.device_arch(device)
    except _QUERY_ERRORS as e:
        result["device_error"] = str(e)
        return result
    if arch is None:
        result["device_error"] = f"device {device} is not usable (no driver, or no such device)"
        return result
    result["device_arch"] = arch
    for op, keys in variants.items():
        for key in keys:
            result["picks"].append(_pick(native, op, key, device))
    return result


def _pick(native: Any, op: str, key: str, device: int) -> dict[str, str]:
    """The variant a typical call of (op, key) would use on `device`, or why there is none."""
    pick = {"op": op, "key": key, "call": "?"}
    example = None
    for name in (op, f"_{op}"):  # a kernel op a public op serves through a helper: `_op`
        try:
            example = importlib.import_module(f"{__package__}.{name}").example_shapes
            break
        except (ImportError, AttributeError):
            continue
    if example is None:
        pick["error"] = "no Python wrapper for this op in this package"
        return pick
    pick["call"], shapes = example(key)
    try:
        pick["variant"] = native.select(native.lookup(op, key), device, shapes)
    except _QUERY_ERRORS as e:
        pick["error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
    return pick


def format_info(d: dict[str, Any]) -> str:
    """`info()` as the text `python -m tileaot info` prints."""
    lines = [
        f"tileaot {d['version']}",
        f"native module: {d['native']}",
        f"archs in this build: {' '.join(d['archs']) or '(none)'}",
        f"ops filter: {d['ops']}",
        "variants (op / key / spec: archs, in dispatch order):",
    ]
    if not d["variants"]:
        lines.append("  (none)")
    for op, keys in d["variants"].items():
        lines.append(f"  {op}")
        for key, specs in keys.items():
            lines.append(f"    {key}")
            for spec, archs in specs.items():
                lines.append(f"      {spec:<16} {' '.join(archs)}")
    if d["device_arch"] is None:
        lines.append(f"device {d['device']}: no CUDA device/driver: {d['device_error']}")
        return "\n".join(lines)
    lines.append(f"device {d['device']}: {d['device_arch']}; a typical call of each op/key picks:")
    for p in d["picks"]:
        outcome = p["variant"] if "variant" in p else f"none: {p['error']}"
        lines.append(f"  {p['op']:<20} {p['key']:<12} {p['call']:<28} -> {outcome}")
    return "\n".join(lines)
