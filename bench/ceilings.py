"""The two ceilings every other number is read against, measured on this GPU now.

    python bench/ceilings.py [--json ceilings.json]

Device-to-device copy of 2 GiB in GB/s, counting bytes read + written (what a memory-bound op
can at best reach), a write-only fill of 2 GiB (the bound of write-heavy ops), and torch's
bf16 matmul at 8192³ in TFLOP/s (cuBLAS: what gemm is held to).
Inputs random, never zeros (a matmul on zeros runs faster than on real data).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from timing import measure

MATMUL_N = 8192


def copy_ceiling() -> dict:
    src = torch.randn(2**29, device="cuda")  # 2 GiB of float32: far past L2
    dst = torch.empty_like(src)
    t = measure(lambda: dst.copy_(src))
    return {"copy_gbs": 2 * src.numel() * 4 / t.median_us / 1e3, "copy_reps": t.reps}


def write_ceiling() -> dict:
    """Write-only bandwidth (a fill of 2 GiB): the bound of ops that mostly write, like
    moe_expand (one read of x, k writes of each row), which the copy ceiling overstates if
    DRAM writes are slower than reads."""
    dst = torch.empty(2**29, device="cuda")
    t = measure(lambda: dst.fill_(1.5))
    return {"write_gbs": dst.numel() * 4 / t.median_us / 1e3, "write_reps": t.reps}


def matmul_ceiling(n: int = MATMUL_N) -> dict:
    a = torch.randn(n, n, device="cuda").bfloat16()
    b = torch.randn(n, n, device="cuda").bfloat16()
    t = measure(lambda: torch.matmul(a, b))
    return {
        "matmul_size": f"{n}x{n}x{n}",
        "matmul_us": t.median_us,
        "matmul_tflops": 2 * n**3 / t.median_us / 1e6,
        "matmul_reps": t.reps,
    }


def device_facts() -> dict:
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,
        "capability": f"{props.major}.{props.minor}",
        "sms": props.multi_processor_count,
        "l2_bytes": props.L2_cache_size,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    result = device_facts() | copy_ceiling() | write_ceiling() | matmul_ceiling()
    print(
        f"{result['gpu']}: device-to-device copy {result['copy_gbs']:.0f} GB/s; fill "
        f"{result['write_gbs']:.0f} GB/s; torch bf16 "
        f"matmul {result['matmul_size']} {result['matmul_us']:.1f} us = "
        f"{result['matmul_tflops']:.1f} TFLOP/s"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
