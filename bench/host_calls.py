"""Host overhead per call: 10,000 back-to-back calls on tiny inputs, wall time / count.

    python bench/host_calls.py [--calls 10000] [--bursts 5] [--tilelang] [--json host.json]

The call is RMSNorm of x[4, 4096] bf16 (a 3-tensor op: x, weight, out): tileaot with `out=`
(and allocating), torch eager (`torch.nn.functional.rms_norm`, one torch call) and, with
--tilelang, TileLang's JIT kernel of the same variant called on the same tensors (recorded
from the tileaot call, see jit_compare.py). For each, `bursts` runs of `calls` calls: `us` is
the wall time until the last call returned (what the caller's thread spends), `us_synced` until
the GPU finished them too; both are medians over bursts. The GPU work per call is a few µs,
so where the host is faster than that the queue fills and `us` rises to the GPU's pace.
The first row of each implementation is its headline (bench/targets.py reads it so).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # kernels_py, for --tilelang

import tileaot  # noqa: E402

SHAPE = (4, 4096)


def per_call(fn, calls: int, bursts: int) -> dict:
    for _ in range(min(calls, 1000)):  # warm-up: handles looked up, module loaded, caches hot
        fn()
    torch.cuda.synchronize()
    returned, synced = [], []
    for _ in range(bursts):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        returned.append(time.perf_counter() - start)
        torch.cuda.synchronize()
        synced.append(time.perf_counter() - start)
    return {
        "us": statistics.median(returned) / calls * 1e6,
        "us_synced": statistics.median(synced) / calls * 1e6,
    }


def tilelang_call(x, w, y):
    """TileLang's JIT kernel of the variant tileaot.rms_norm(x, w, out=y) runs, and its args."""
    from jit_compare import JitCase, _points, record

    points, arch = _points()
    (jit,) = [JitCase(c, points, arch) for c in record(lambda: tileaot.rms_norm(x, w, out=y)).calls]
    kernel, args = jit.kernel, jit.args
    return jit.variant, lambda: kernel(*args)


@contextlib.contextmanager
def checked_path_only():
    """tileaot's ops without their short path (`_lib.fast` never finds a learned handle)."""
    from tileaot import _lib

    fast, learn = _lib._fast, _lib.learn
    _lib._fast, _lib.learn = {}, lambda key, handle: None
    try:
        yield
    finally:
        _lib._fast, _lib.learn = fast, learn


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--bursts", type=int, default=5)
    parser.add_argument("--tilelang", action="store_true", help="also TileLang's JIT kernel")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    x = torch.randn(*SHAPE, device="cuda").bfloat16()
    w = torch.randn(SHAPE[-1], device="cuda").bfloat16()
    y = torch.empty_like(x)
    cases = [
        ("tileaot", "tileaot.rms_norm(x, w, out=y)", lambda: tileaot.rms_norm(x, w, 1e-6, out=y)),
        ("tileaot", "tileaot.rms_norm(x, w) (allocating)", lambda: tileaot.rms_norm(x, w, 1e-6)),
        (
            "torch eager",
            "torch.nn.functional.rms_norm(x, (4096,), w) (allocating)",
            lambda: torch.nn.functional.rms_norm(x, SHAPE[-1:], w, 1e-6),
        ),
        ("floor", "torch.empty_like(x) (one torch call, no launch)", lambda: torch.empty_like(x)),
    ]
    result = {"input": f"x{list(SHAPE)} bf16", "calls": args.calls, "bursts": args.bursts}
    if args.tilelang:
        try:
            variant, jit_fn = tilelang_call(x, w, y)
            cases.append(("TileLang JIT", f"JIT kernel {variant}(x, w, y, eps)", jit_fn))
        except Exception as exc:  # the other rows still count
            result["tilelang_error"] = f"{type(exc).__name__}: {exc}"[:300]
            print(f"TileLang JIT row left out: {result['tilelang_error']}")
    rows = []
    for impl, call, fn in cases:
        rows.append({"impl": impl, "call": call} | per_call(fn, args.calls, args.bursts))
        print(f"{call:58s} {rows[-1]['us']:7.2f} us ({rows[-1]['us_synced']:.2f} synced)")
    with checked_path_only():  # what the short path saves: the same call, checks in Python
        call = "tileaot.rms_norm(x, w, out=y), checked path only"
        fn = cases[0][2]
        rows.append({"impl": "tileaot checked", "call": call} | per_call(fn, args.calls, 3))
        print(f"{call:58s} {rows[-1]['us']:7.2f} us ({rows[-1]['us_synced']:.2f} synced)")
    if args.json:
        Path(args.json).write_text(json.dumps(result | {"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
