"""Lowering classes: trace one arch of a group whose lowering of a variant is identical.

A KernelSpec declares (`lowering_classes`, kernels_py/spec.py) which archs produce the same
traced data for a variant: device source, launch facts and signature. The build traces the
group's representative (the oldest of its archs that the build targets) and hands that trace
to the group's other archs; each arch still gets its own compile (its own -arch, its own
cubin), so only the tracing is shared. The source names no arch (the kernel symbol is the
variant's name), which is what makes one source valid for several targets.

`python -m build_tools verify-lowering-classes [--ops GLOB]` (build_tools/verify_lowering.py)
traces every arch of every group on its own and fails naming op, variant and archs where a
group's traces differ (`mismatches`).
TILEAOT_TRACE_EVERY_ARCH=1 turns the sharing off for a build (to compare, or to distrust).
"""

from __future__ import annotations

import json
import os

from build_tools.matrix import ARCH_ORDER, VariantPoint

ENV_VAR = "TILEAOT_TRACE_EVERY_ARCH"


def sharing_enabled(environ=os.environ) -> bool:
    """False when $TILEAOT_TRACE_EVERY_ARCH asks for one trace per arch."""
    return environ.get(ENV_VAR, "").strip() not in ("1", "true", "yes", "on")


def groups_built(point: VariantPoint) -> list[tuple[str, ...]]:
    """The declared groups, narrowed to the archs this point is built for, oldest first (the
    oldest arch's source is valid CUDA for the newer ones: a group declared too wide would
    cost them an optimisation, not correctness)."""
    groups = point.spec.lowering_groups(point.key, point.specialisation)
    return [tuple(sorted((a for a in point.archs if a in g), key=ARCH_ORDER.get)) for g in groups]


def representatives(point: VariantPoint, share: bool = True) -> dict[str, str]:
    """arch -> the arch whose trace it uses: the oldest built arch of its group, else itself."""
    reps = {a: a for a in point.archs}
    if share:
        for group in groups_built(point):
            for arch in group:
                reps[arch] = group[0]
    return reps


def trace_count(points: list[VariantPoint], share: bool = True) -> int:
    """How many traces a build of `points` runs (before the cache)."""
    return sum(len(set(representatives(p, share).values())) for p in points)


def mismatches(points: list[VariantPoint], traced: dict) -> list[str]:
    """One line per group member whose trace (traced[(name, arch)], each arch traced on its
    own) differs from its group's first arch: op, variant, both archs and what differs."""
    problems = []
    for p in points:
        for group in groups_built(p):
            for arch in group[1:]:
                what = _difference(traced[(p.name, group[0])], traced[(p.name, arch)])
                if what:
                    problems.append(
                        f"{p.spec.op}: {p.name}: {group[0]} and {arch} differ in {what}, "
                        f"but lowering_classes puts them in one group"
                    )
    return problems


def _difference(a, b) -> str:
    """Which part of two traces ([signature, {"source", "kernels"}]) differs, or ''."""
    (sig_a, low_a), (sig_b, low_b) = a, b
    if low_a["source"] != low_b["source"]:
        lines_a, lines_b = low_a["source"].splitlines(), low_b["source"].splitlines()
        line = next(
            (i for i, (x, y) in enumerate(zip(lines_a, lines_b, strict=False)) if x != y),
            min(len(lines_a), len(lines_b)),
        )
        return f"the device source (from line {line + 1})"
    if json.dumps(low_a["kernels"], sort_keys=True) != json.dumps(low_b["kernels"], sort_keys=True):
        return "the launch facts"
    if json.dumps(sig_a, sort_keys=True) != json.dumps(sig_b, sort_keys=True):
        return "the signature"
    return ""
