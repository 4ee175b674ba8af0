"""Trace every (variant, arch) of the matrix: cached by content, the rest in parallel workers.

A trace's cache key covers everything it depends on: the job (op, key, specialisation, arch,
hence the kernel symbol), the kernel module's source and the project modules it imports
(cache.module_digest), build_tools' tracer (trace.py, cexpr.py, smem_slots.py) and the
tilelang version.

Archs of one lowering class (build_tools/lowering.py) share their representative's trace,
and so its cache entry: a shared arch has no key of its own.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path

from build_tools import work_queue
from build_tools.cache import Cache, digest, module_digest
from build_tools.lowering import representatives, sharing_enabled
from build_tools.matrix import VariantPoint
from build_tools.progress import Progress, note

TRACE_FORMAT = 2  # bump when the traced data's shape changes
_TRACER_FILES = ("trace.py", "cexpr.py", "smem_slots.py")


def job_name(name: str, arch: str) -> str:
    return f"{name}@{arch}"


def trace_job(module: str, op: str, key: dict, specialisation: dict, arch: str) -> list:
    """Runs in a worker process: trace one (variant, arch) into plain JSON data."""
    from build_tools.specs import load_specs
    from build_tools.trace import trace

    spec = next(s for s in load_specs(module) if s.op == op)
    sig, lowered = trace(VariantPoint(spec, key, specialisation, (arch,)), arch)
    sig_data = asdict(sig)
    sig_data["text"] = sig.text()
    # Through JSON: TVM's string and int subclasses must not leak into the results.
    return json.loads(json.dumps([sig_data, lowered]))


def _job_args(module: str, point: VariantPoint, arch: str) -> list:
    return [module, point.spec.op, dict(point.key), dict(point.specialisation), arch]


def trace_key(module: str, point: VariantPoint, arch: str) -> str:
    here = Path(__file__).parent
    return digest(
        f"trace format {TRACE_FORMAT}",
        json.dumps(_job_args(module, point, arch), sort_keys=True),
        module_digest(point.spec.factory.__module__),
        *[(here / name).read_bytes() for name in _TRACER_FILES],
        _tilelang_version(),
    )


@functools.cache
def _tilelang_version() -> str:
    return version("tilelang")


def estimate(timings: dict[str, float], point: VariantPoint, arch: str) -> float:
    """Expected seconds of a trace: its last time, else its variant's or op's mean on other
    archs, else the mean of everything known (1 s on a first build)."""
    exact = timings.get(job_name(point.name, arch))
    if exact is not None:
        return exact
    for prefix in (f"{point.name}@", f"{point.spec.op}_"):
        known = [t for k, t in timings.items() if k.startswith(prefix)]
        if known:
            return statistics.fmean(known)
    return statistics.fmean(timings.values()) if timings else 1.0


def trace_all(
    points: list[VariantPoint], jobs: int, module: str, cache: Cache, share: bool | None = None
) -> tuple[dict, dict]:
    """({(name, arch): [signature, lowered]}, {(name, arch): {"seconds", "cached"}}).

    `share` (None: unless $TILEAOT_TRACE_EVERY_ARCH): trace one arch per lowering class and
    give its trace to the class's other archs (their stats: {"shared": representative})."""
    share = sharing_enabled() if share is None else share
    reps = {p.name: representatives(p, share) for p in points}
    work = [(p, a) for p in points for a in dict.fromkeys(reps[p.name].values())]
    traced, stats, todo = {}, {}, []
    timings = cache.timings()
    for point, arch in work:
        key = trace_key(module, point, arch)
        entry = cache.get_json("trace", key)
        if entry is not None:
            traced[(point.name, arch)] = entry["result"]
            stats[(point.name, arch)] = {"seconds": entry["seconds"], "cached": True}
        else:
            todo.append((point, arch, key))
    if todo:
        _trace_missing(todo, jobs, module, cache, timings, traced, stats)
    shared = _share_traces(points, reps, traced, stats)
    line = (
        f"tileaot generate: traced {len(todo)}, from cache {len(work) - len(todo)}, "
        f"shared by a lowering class {shared} (cache: {cache.root})"
    )
    print(line, file=sys.stderr)
    note(line)
    return traced, stats


def _share_traces(points, reps: dict, traced: dict, stats: dict) -> int:
    """Fill in the archs that use another arch's trace; how many there are."""
    count = 0
    for p in points:
        for arch, rep in reps[p.name].items():
            if arch != rep:
                traced[(p.name, arch)] = traced[(p.name, rep)]
                stats[(p.name, arch)] = {"seconds": 0.0, "cached": None, "shared": rep}
                count += 1
    return count


def _trace_missing(todo, jobs, module, cache, timings, traced, stats) -> None:
    by_name = {job_name(p.name, a): (p, a, k) for p, a, k in todo}
    queue = [
        work_queue.Job(name, _job_args(module, p, a), estimate(timings, p, a))
        for name, (p, a, _) in by_name.items()
    ]
    progress = Progress("tracing", len(queue), sum(j.estimate for j in queue))
    weights = {j.key: j.estimate for j in queue}
    failures, new_timings = [], {}

    def done(outcome: work_queue.Outcome) -> None:
        point, arch, key = by_name[outcome.key]
        if outcome.ok:
            traced[(point.name, arch)] = outcome.result
            stats[(point.name, arch)] = {"seconds": outcome.seconds, "cached": False}
            new_timings[outcome.key] = round(outcome.seconds, 3)
            cache.put_json("trace", key, {"result": outcome.result, "seconds": outcome.seconds})
        else:
            failures.append(outcome.key)
            progress.message(f"tileaot generate: tracing {outcome.key} failed:\n{outcome.error}")
        progress.advance(weights[outcome.key], outcome.key)

    try:
        work_queue.run(queue, "build_tools.tracing:trace_job", min(jobs, len(queue)), done)
    finally:
        progress.close()
        cache.add_timings(new_timings)  # even after a failure: the next build orders better
    if failures:
        raise SystemExit(
            f"tileaot generate: {len(failures)} of {len(queue)} traces failed (tracebacks "
            f"above): {', '.join(sorted(failures))}"
        )
