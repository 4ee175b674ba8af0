"""Kernel time of each tileaot op against its torch equivalent, at one large and one small size.

    python bench/run.py [--json results.json]

Median of `triton.testing.do_bench` (it flushes L2 between repetitions), inputs random, never
zeros. Memory-bound ops report GB/s (bytes read + written) and the ratio to a device-to-device
copy measured in the same run; gemm reports TFLOP/s. Needs a CUDA GPU, torch and triton.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # kernels_py references

import tileaot  # noqa: E402
from host_profile import per_call_us  # noqa: E402  (bench/ is sys.path[0] for a script)


def median_us(fn) -> float:
    return do_bench(fn, warmup=50, rep=300, return_mode="median") * 1e3


def copy_ceiling() -> float:
    """GB/s of a 2 GiB device-to-device copy, counting bytes read + written."""
    src = torch.randn(2**29, device="cuda")  # 2 GiB of float32
    dst = torch.empty_like(src)
    us = median_us(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / us / 1e3


def load_cases() -> list[tuple]:
    """Every bench/ops/<op>.py's CASES: (label, size, make) with make() → (ours, torch, bytes,
    flops); one file per op so ops are added without touching this runner."""
    import importlib

    cases = []
    for path in sorted((Path(__file__).parent / "ops").glob("*.py")):
        if path.stem != "__init__":
            cases += importlib.import_module(f"ops.{path.stem}").CASES
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
    args = parser.parse_args()
    ceiling = copy_ceiling()
    print(f"{torch.cuda.get_device_name()}; device-to-device copy: {ceiling:.0f} GB/s")
    rows = []
    for op, size, make in load_cases():
        try:
            ours, theirs, nbytes, flops = make()
            t_ours, t_torch = median_us(ours), median_us(theirs)
        except Exception as exc:  # one broken case must not hide the others
            print(f"{op:30s} {size:16s} FAILED: {type(exc).__name__}: {exc}")
            continue
        rows.append(
            {
                "op": op,
                "size": size,
                "tileaot_us": t_ours,
                "torch_us": t_torch,
                "bytes": nbytes,
                "flops": flops,
            }
        )
        print(
            f"{op:30s} {size:16s} tileaot {t_ours:9.1f} us {rate(t_ours, nbytes, flops, ceiling)}"
            f" | torch {t_torch:9.1f} us {rate(t_torch, nbytes, flops, ceiling)}"
        )
    host = host_overhead()
    for row in host:
        print(f"host cost per call, x[4, 4096] bf16: {row['call']:42s} {row['host_us']:6.2f} us")
    if args.json:
        result = {"copy_gbs": ceiling, "rows": rows, "host": host}
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
