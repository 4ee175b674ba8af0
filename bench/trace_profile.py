"""Where one trace's time goes: lower variants with TileLang as the build does, per pass.

    python bench/trace_profile.py swiglu_bf16_any@sm_80 [moe_expand_bf16_any@sm_100f ...]
        [--passes 8] [--json out.json]

Each ``variant@arch`` is traced by build_tools' own tracer (build_tools.tracing.trace_job:
factory, lowering, launch facts), with no tileaot cache involved, in this process one after
another after a warm-up trace (the first lowering of a process pays TVM's lazy set-up). It
prints the trace's CPU seconds (the process's, what a build worker spends; wall time on a
shared machine is several times more) and the slowest top-level TileLang/TVM passes of its
lowering (tvm.ir.instrument.PassTimingInstrument: wall microseconds). Set TILELANG_CACHE_DIR
to a scratch folder. Results: bench/results/build-2026-12-02-tracing.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WARM_UP = "rms_norm_bf16_n4096@sm_90a"  # cheap (< 1 s warm)


def _top_passes(rendered: str, count: int) -> list[tuple[str, float]]:
    """(pass, seconds) of the slowest top-level passes in PassTimingInstrument's render()."""
    rows = []
    for line in rendered.splitlines():
        m = re.match(r"(\S.*?): (\d+)us \[", line)  # nested passes are indented: skipped
        if m:
            rows.append((m.group(1), int(m.group(2)) / 1e6))
    return sorted(rows, key=lambda r: -r[1])[:count]


def profile(item: str, count: int) -> dict:
    """Trace `item` ("variant@arch") once; its CPU and wall seconds and slowest passes."""
    import tilelang
    from tilelang import tvm
    from tvm.ir.instrument import PassTimingInstrument
    from tvm.target import Target

    import build_tools.trace as trace_mod
    from build_tools.matrix import enumerate_variants, parse_archs
    from build_tools.specs import load_specs
    from build_tools.tracing import trace_job

    name, _, arch = item.partition("@")
    points = enumerate_variants(load_specs("kernels_py"), parse_archs(arch), (name,))
    point = next((p for p in points if p.name == name), None)
    if point is None:
        raise SystemExit(
            f"trace_profile: no variant {name!r} for {arch} (python -m build_tools list)"
        )
    timing = PassTimingInstrument()
    rendered: list[str] = []
    plain_lower = trace_mod.lower

    def timed_lower(func, target_arch):
        # build_tools.trace.lower with the instrument: a PassContext of its own would hide it
        # (editing trace.py instead would change every trace's cache key).
        target = Target({"kind": "cuda", "arch": target_arch})
        with tvm.transform.PassContext(opt_level=3, instruments=[timing]), target:
            artifact = tilelang.lower(func, target=target)
            rendered.append(timing.render())  # leaving the context clears the timings
            return artifact

    trace_mod.lower = timed_lower  # the job imports build_tools.trace: it sees this one
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        trace_job("kernels_py", point.spec.op, dict(point.key), dict(point.specialisation), arch)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        passes = _top_passes("\n".join(rendered), count)
    finally:
        trace_mod.lower = plain_lower
    return {"item": item, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "passes": passes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("items", nargs="+", help="variant@arch, e.g. swiglu_bf16_any@sm_80")
    parser.add_argument("--passes", type=int, default=8, help="slowest passes to print")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    profile(WARM_UP, 0)
    results = []
    for item in args.items:
        r = profile(item, args.passes)
        results.append(r)
        print(f"{item}: {r['cpu_s']:.2f} CPU s, {r['wall_s']:.2f} wall s")
        for name, seconds in r["passes"]:
            print(f"  {seconds:8.2f} s  {name}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
