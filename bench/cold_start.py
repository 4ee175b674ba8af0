"""Cold start: a fresh interpreter until the first correct result, in separate processes.

    python bench/cold_start.py [--repeats 5] [--tilelang]

Reports the median wall time of: `import torch` alone (to subtract), and import + first
correct `rms_norm` result for tileaot and (with --tilelang, if importable) TileLang's JIT of
the same kernels_py factory with an empty and with a warm cache.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Each script times up to its first result on the GPU (synchronised); checking the result
# comes after the clock stops, so torch's own first-use costs of the check are not counted.
TORCH_ONLY = """
import time; t = time.perf_counter()
import torch
x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
print(time.perf_counter() - t)
"""

TILEAOT = """
import time; t = time.perf_counter()
import torch, tileaot
x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
y = tileaot.rms_norm(x, w, 1e-6)
torch.cuda.synchronize()
elapsed = time.perf_counter() - t
ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).bfloat16()
assert torch.allclose(y.float(), ref.float(), rtol=2e-2, atol=2e-2)
print(elapsed)
"""

TILELANG_JIT = """
import time; t = time.perf_counter()
import torch, tilelang
from kernels_py.norm.rms_norm import factory
kernel = tilelang.compile(factory(arch="sm_90a", dtype="bfloat16", N=4096), target="cuda")
x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
y = torch.empty_like(x)
kernel(x, w, y, 1e-6)
torch.cuda.synchronize()
elapsed = time.perf_counter() - t
ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).bfloat16()
assert torch.allclose(y.float(), ref.float(), rtol=2e-2, atol=2e-2)
print(elapsed)
"""


def run(code: str, env: dict) -> float:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def median_of(code: str, env: dict, repeats: int) -> float:
    return statistics.median(run(code, env) for _ in range(repeats))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tilelang", action="store_true")
    args = parser.parse_args()
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
    )
    rows = {"import torch + CUDA init + inputs": median_of(TORCH_ONLY, env, args.repeats)}
    rows["tileaot: import + first rms_norm"] = median_of(TILEAOT, env, args.repeats)
    if args.tilelang:
        with tempfile.TemporaryDirectory() as cache:
            cold = []
            for i in range(args.repeats):
                cold.append(run(TILELANG_JIT, dict(env, TILELANG_CACHE_DIR=f"{cache}/{i}")))
            rows["tilelang JIT, empty cache"] = statistics.median(cold)
            rows["tilelang JIT, warm cache"] = median_of(
                TILELANG_JIT, dict(env, TILELANG_CACHE_DIR=f"{cache}/0"), args.repeats
            )
    base = rows["import torch + CUDA init + inputs"]
    for name, seconds in rows.items():
        extra = "" if name.startswith("import torch") else f"  (+{seconds - base:.3f} s)"
        print(f"cold start, {name:36s} {seconds:7.3f} s{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
