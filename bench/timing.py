"""GPU time of a callable: the median of CUDA-event-timed repetitions, L2 emptied before each.

    from timing import measure, median_us
    t = measure(fn)          # Timing(median_us, reps, p10_us, p90_us)

Why not `triton.testing.do_bench`: it sizes its repetitions by time (`rep` ms), so a reference
that takes 30 ms gets fewer than ten, and it empties L2 by *writing* a buffer, which leaves tens
of MB of dirty lines that the timed kernel then pays to write back. Here every measurement has
at least `MIN_REPS` repetitions, and before each one a read of a buffer four times the L2 (at
least 256 MiB) replaces whatever the previous repetition left there with clean lines, so the
inputs come from device memory as if they had been rotated. That read also keeps the GPU busy
long enough (tens of µs) for the host to enqueue the timed call before the GPU reaches it, so a
small kernel's time is not its launch latency.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

MIN_REPS = 30
MAX_REPS = 300
TARGET_MS = 100.0  # repetitions aim at this much timed GPU work, within [MIN_REPS, MAX_REPS]
WARMUP_S = 0.025  # synchronised calls before timing: module loads, allocator, clocks

_flush: dict[int, torch.Tensor] = {}


@dataclass(frozen=True)
class Timing:
    median_us: float
    reps: int
    p10_us: float
    p90_us: float


def _flush_buffer() -> torch.Tensor:
    device = torch.cuda.current_device()
    if device not in _flush:
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        nbytes = max(4 * l2, 256 << 20)
        # Random, not zeros: a read of constant data could be served in ways real data is not.
        _flush[device] = torch.rand(nbytes // 4, device="cuda")
    return _flush[device]


def _warm_up(fn) -> float:
    """Calls `fn` synchronously for WARMUP_S (at least 3 times); its mean wall time in ms."""
    calls, start = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - start < WARMUP_S:
        fn()
        torch.cuda.synchronize()
        calls += 1
    return (time.perf_counter() - start) / calls * 1e3


def measure(fn, min_reps: int = MIN_REPS) -> Timing:
    """Median GPU time of `fn()` over at least `min_reps` repetitions, each after an L2 flush."""
    estimate_ms = _warm_up(fn)
    reps = int(min(MAX_REPS, max(min_reps, TARGET_MS / max(estimate_ms, 1e-3))))
    flush = _flush_buffer()
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(reps)
    ]
    for start, end in events:
        flush.sum()  # read-only: evicts the last repetition's data, leaves no dirty lines
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) * 1e3 for start, end in events)
    return Timing(
        median_us=statistics.median(times),
        reps=reps,
        p10_us=times[len(times) // 10],
        p90_us=times[(len(times) * 9) // 10],
    )


def median_us(fn) -> float:
    return measure(fn).median_us


def rate_row(name: str, fn, nbytes: int, copy_gbs: float) -> dict:
    """Times `fn`, prints one line (µs, % of the copy ceiling for `nbytes` moved) and returns
    it as a dict: the rows of the design probes (bench/*_probe.py)."""
    us = measure(fn).median_us
    pct = 100 * nbytes / us / 1e3 / copy_gbs
    print(f"{name:<60} {us:8.1f} us {pct:5.1f} % of copy", flush=True)
    return {"name": name, "us": us, "pct_copy": pct}
