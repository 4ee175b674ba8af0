"""Kernel time of each tileaot op against its torch equivalent, at one large and one small size.

    python bench/run.py [--json results.json] [--match REGEX]

Median of >= 30 CUDA-event-timed repetitions, L2 emptied before each (bench/timing.py), inputs
random, never zeros. Memory-bound ops report GB/s (bytes read + written) and the ratio to a
device-to-device copy measured in the same run; gemm reports TFLOP/s, and gemm at 8192³ is
also held to torch.matmul (the issue-4 target). Needs a CUDA GPU and torch.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # kernels_py references

import ceilings  # noqa: E402  (bench/ is sys.path[0] for a script)
import tileaot  # noqa: E402
from host_profile import per_call_us  # noqa: E402  (bench/ is sys.path[0] for a script)
from timing import measure, median_us  # noqa: E402, F401  (median_us: jit_compare, tune)

# gemm at the size the issue-4 target names (>= 0.9x torch.matmul), unless ops/gemm.py has it.
CEILING_GEMM = ("gemm bf16", "8192x8192x8192")


def copy_ceiling() -> float:
    """GB/s of a 2 GiB device-to-device copy, counting bytes read + written."""
    return ceilings.copy_ceiling()["copy_gbs"]


def load_cases() -> list[tuple]:
    """Every bench/ops/<op>.py's CASES: (label, size, make) with make() → (ours, torch, bytes,
    flops); one file per op so ops are added without touching this runner."""
    import importlib

    cases = []
    for path in sorted((Path(__file__).parent / "ops").glob("*.py")):
        if path.stem != "__init__":
            cases += importlib.import_module(f"ops.{path.stem}").CASES
    if all((label, size) != CEILING_GEMM for label, size, _ in cases):
        from ops.gemm import _case as gemm_case

        cases.append((*CEILING_GEMM, lambda: gemm_case(8192, 8192, 8192)))
    return cases


def rate(us: float, nbytes, flops, ceiling: float) -> str:
    if flops:
        return f"{flops / us / 1e6:8.1f} TFLOP/s"
    gbs = nbytes / us / 1e3
    return f"{gbs:8.0f} GB/s ({100 * gbs / ceiling:3.0f} % of copy)"


def host_overhead() -> list[dict]:
    x = torch.randn(4, 4096, device="cuda").bfloat16()
    w = torch.randn(4096, device="cuda").bfloat16()
    y = torch.empty_like(x)
    cases = {
        "tileaot.rms_norm(x, w, out=y)": lambda: tileaot.rms_norm(x, w, 1e-6, out=y),
        "tileaot.rms_norm(x, w) (allocating)": lambda: tileaot.rms_norm(x, w, 1e-6),
        "torch.nn.functional.rms_norm": lambda: torch.nn.functional.rms_norm(x, (4096,), w, 1e-6),
        "torch.empty_like (floor: one torch call)": lambda: torch.empty_like(x),
    }
    return [{"call": name, "host_us": per_call_us(fn)} for name, fn in cases.items()]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--match", default=".", help="only cases whose label matches")
    args = parser.parse_args()
    ceiling = copy_ceiling()
    print(f"{torch.cuda.get_device_name()}; device-to-device copy: {ceiling:.0f} GB/s")
    rows, failed = [], []
    for op, size, make in load_cases():
        if not re.search(args.match, op):
            continue
        try:
            ours, theirs, nbytes, flops = make()
            t_ours, t_torch = measure(ours), measure(theirs)
        except Exception as exc:  # one broken case must not hide the others
            print(f"{op:30s} {size:16s} FAILED: {type(exc).__name__}: {exc}", flush=True)
            failed.append({"op": op, "size": size, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        rows.append(
            {
                "op": op,
                "size": size,
                "tileaot_us": t_ours.median_us,
                "torch_us": t_torch.median_us,
                "bytes": nbytes,
                "flops": flops,
                "tileaot_reps": t_ours.reps,
                "torch_reps": t_torch.reps,
            }
        )
        us, torch_us = t_ours.median_us, t_torch.median_us
        print(
            f"{op:30s} {size:16s} tileaot {us:9.1f} us {rate(us, nbytes, flops, ceiling)}"
            f" | torch {torch_us:9.1f} us {rate(torch_us, nbytes, flops, ceiling)}",
            flush=True,
        )
    host = host_overhead()
    for row in host:
        print(f"host cost per call, x[4, 4096] bf16: {row['call']:42s} {row['host_us']:6.2f} us")
    if args.json:
        result = {"copy_gbs": ceiling, "rows": rows, "failed": failed, "host": host}
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
