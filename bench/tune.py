"""Try kernel-file constants (tile sizes, threads) through TileLang's JIT on a bench case.

    python bench/tune.py CASE_REGEX 'ROWS=1' 'ROWS=2;THREADS=256' 'TILE={1: 2, 2: 4}' ...

For the first bench case whose label matches, the tileaot call is recorded (see
jit_compare.py); each candidate re-traces the same variant's factory with the op's module
constants patched, runs on the same buffers, and reports its median time and whether its
outputs equal tileaot's bit for bit (the shipped kernel as the reference: a candidate that
differs needs a look before it ships). Needs tilelang (scripts/gpu_check.sh tune ...).
"""

from __future__ import annotations

import ast
import re
import sys

from jit_compare import _points, expected_after, owned_cases, record_owned, replay_matches, run_all
from run import load_cases, median_us


def parse(candidate: str) -> dict:
    pairs = (item.split("=", 1) for item in candidate.split(";") if item)
    return {name.strip(): ast.literal_eval(value.strip()) for name, value in pairs}


def main() -> int:
    pattern, candidates = re.compile(sys.argv[1]), [parse(c) for c in sys.argv[2:]]
    points, arch = _points()
    label, size, make = next(c for c in load_cases() if pattern.search(c[0]))
    ours = make()[0]
    rec = record_owned(ours, points, arch)
    shipped = owned_cases(rec, points, arch)
    expected = expected_after(rec)
    names = ", ".join(j.variant for j in shipped)
    print(f"{label} {size}: tileaot {median_us(ours):.1f} us ({names})")
    print(f"  JIT of the shipped source: {median_us(lambda: run_all(shipped)):.1f} us")
    for overrides in candidates:
        try:
            jits = owned_cases(rec, points, arch, overrides)
            same = replay_matches(jits, expected)
            us = median_us(lambda jits=jits: run_all(jits))
            print(f"  {overrides}: {us:.1f} us identical={same}", flush=True)
        except Exception as exc:  # a candidate that does not trace or compile
            print(f"  {overrides}: FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
