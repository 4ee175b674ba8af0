"""`python -m build_tools verify-lowering-classes [--ops GLOB] [--archs ...]`: check the
lowering classes the kernel specs declare (build_tools/lowering.py) by tracing every arch of
every class on its own (through the trace cache) and comparing the traces. Fails naming op,
variant and the two archs for each difference; run it after declaring or widening a class and
after a TileLang upgrade.
"""

from __future__ import annotations

import argparse
import os
import sys

from build_tools.cache import Cache
from build_tools.lowering import groups_built, mismatches
from build_tools.matrix import VariantPoint
from build_tools.tracing import trace_all


def verify(points: list[VariantPoint], jobs: int, module: str, cache=None) -> list[str]:
    """Trace every arch of every declared group separately; the mismatches (empty: verified)."""
    points = [p for p in points if any(len(g) > 1 for g in groups_built(p))]
    if not points:
        return []
    traced, _ = trace_all(points, jobs, module, cache or Cache(), share=False)
    return mismatches(points, traced)


def main(argv: list[str]) -> int:
    from build_tools.matrix import enumerate_variants, parse_archs, parse_ops
    from build_tools.specs import load_specs
    from kernels_py.spec import DEFAULT_ARCHS

    parser = argparse.ArgumentParser(prog="python -m build_tools verify-lowering-classes")
    parser.add_argument("--archs", default=",".join(DEFAULT_ARCHS))
    parser.add_argument("--ops", default="*", help="globs over variant names, e.g. 'rms_norm*'")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--specs", default="kernels_py", help="module whose all_specs() to check")
    args = parser.parse_args(argv)
    try:
        archs = parse_archs(args.archs)
    except ValueError as e:
        print(f"error: --archs {args.archs!r}: {e}", file=sys.stderr)
        return 2
    points = enumerate_variants(load_specs(args.specs), archs, parse_ops(args.ops))
    shared = [p for p in points if any(len(g) > 1 for g in groups_built(p))]
    problems = verify(shared, args.jobs, args.specs)
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    verdict = f"{len(problems)} mismatches" if problems else "every group identical"
    print(
        f"tileaot verify-lowering-classes: {len(shared)} of {len(points)} variants declare "
        f"shared lowerings; {verdict}",
        file=sys.stderr,
    )
    return 1 if problems else 0
