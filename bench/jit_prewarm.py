"""Fill TileLang's kernel cache with the JIT build of every variant of the GPU build, in parallel.

    python bench/jit_prewarm.py [--workers N] [--match GLOB] [--json prewarm.json]

jit_compare.py JIT-compiles the variants the bench cases run one after the other, 5-12 s each
(TileLang's host wrapper is a CUTLASS-heavy C++ file): about ten minutes for the catalog, more
than the whole suite may take. This runs the very same compile (jit_compare's `_jit`: same
factory, key, specialisation and Target, hence the same cache key) for every variant in
build/gpu/gen/manifest.json, split over N worker processes that write the cache named by
TILELANG_CACHE_DIR; jit_compare then loads each kernel from that cache instead. Needs tilelang
(and torch, which it imports); no GPU. `--shard I/N` is what one worker runs.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "build" / "gpu" / "gen" / "manifest.json"


def manifest_variants(pattern: str) -> tuple[str, list[str]]:
    """(arch, variant names) of the build the GPU check installed, filtered by `pattern`."""
    variants = json.loads(MANIFEST.read_text())["variants"]
    archs = sorted({v["arch"] for v in variants})
    if len(archs) != 1:
        raise SystemExit(f"{MANIFEST} has archs {archs}; expected the one of this GPU's build")
    names = sorted(v["name"] for v in variants if fnmatch.fnmatchcase(v["name"], pattern))
    return archs[0], names


def compile_shard(index: int, count: int, pattern: str) -> dict:
    sys.path.insert(0, str(ROOT))  # build_tools, kernels_py
    from jit_compare import _jit

    from build_tools.matrix import enumerate_variants
    from kernels_py import all_specs

    arch, names = manifest_variants(pattern)
    mine = set(names[index::count])
    done, failed = [], {}
    for point in enumerate_variants(all_specs(), (arch,), ("*",)):
        if point.name not in mine:
            continue
        try:
            _jit(point, arch, {})
            done.append(point.name)
        except Exception as exc:  # one variant that does not JIT must not stop the others
            failed[point.name] = f"{type(exc).__name__}: {exc}"[:300]
    return {"compiled": done, "failed": failed}


def run_workers(workers: int, pattern: str) -> dict:
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--shard", f"{i}/{workers}", "--match", pattern],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(workers)
    ]
    compiled, failed, broken = [], {}, []
    for i, proc in enumerate(procs):
        out, _ = proc.communicate()
        lines = out.strip().splitlines()
        if proc.returncode != 0 or not lines:
            broken.append(f"worker {i} exited {proc.returncode}")
            continue
        shard = json.loads(lines[-1])
        compiled += shard["compiled"]
        failed |= shard["failed"]
    return {
        "workers": workers,
        "compiled": len(compiled),
        "failed": failed,
        "broken_workers": broken,
        "seconds": time.perf_counter() - start,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--match", default="*", help="variant-name glob (default: all)")
    parser.add_argument("--shard", help="I/N: compile every N-th variant from I (one worker)")
    parser.add_argument("--json", help="also write the summary here")
    args = parser.parse_args()
    if args.shard:
        index, count = (int(part) for part in args.shard.split("/"))
        print(json.dumps(compile_shard(index, count, args.match)))
        return 0
    result = run_workers(max(1, args.workers), args.match)
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 1 if result["broken_workers"] else 0


if __name__ == "__main__":
    sys.exit(main())
