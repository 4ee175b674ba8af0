"""Cold start: a fresh interpreter until the first correct result, in separate processes.

    python bench/cold_start.py [--repeats 5] [--tilelang] [--json cold_start.json]

Reports the median wall time of: `import torch` alone (to subtract), and import + first
correct `rms_norm` result for tileaot and (with --tilelang, if importable) TileLang's JIT of
the same kernels_py factory with an empty and with a warm cache.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Row names, also read by bench/targets.py.
TORCH_ROW = "import torch + CUDA init + inputs"
TILEAOT_ROW = "tileaot: import + first rms_norm"
JIT_COLD_ROW = "tilelang JIT, empty cache"
JIT_WARM_ROW = "tilelang JIT, warm cache"

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


def sample(args, env: dict, cache: str) -> dict[str, list[float]]:
    """`args.repeats` rounds of every start, interleaved so that drift hits all alike."""
    run(TORCH_ONLY, env)  # not counted: reads torch from disk into the OS file cache
    scripts = {TORCH_ROW: TORCH_ONLY, TILEAOT_ROW: TILEAOT}
    if args.tilelang:
        scripts |= {JIT_COLD_ROW: TILELANG_JIT, JIT_WARM_ROW: TILELANG_JIT}
    samples: dict[str, list[float]] = {name: [] for name in scripts}
    for i in range(args.repeats):
        for name, code in scripts.items():
            # TILELANG_CACHE_DIR is where tilelang 0.1.15 keeps compiled kernels (tilelang/env.py,
            # default ~/.tilelang/cache): a new folder each round is an empty cache; the warm
            # start reads the folder the first empty-cache start filled.
            folder = f"{cache}/{i}" if name == JIT_COLD_ROW else f"{cache}/0"
            samples[name].append(run(code, dict(env, TILELANG_CACHE_DIR=folder)))
    return samples


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tilelang", action="store_true")
    parser.add_argument("--json", help="also write the results (medians and samples) here")
    args = parser.parse_args()
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
    )
    with tempfile.TemporaryDirectory() as cache:
        samples = sample(args, env, cache)
    rows = {name: statistics.median(values) for name, values in samples.items()}
    base = rows[TORCH_ROW]
    for name, seconds in rows.items():
        extra = "" if name == TORCH_ROW else f"  (+{seconds - base:.3f} s)"
        print(f"cold start, {name:36s} {seconds:7.3f} s{extra}")
    if args.json:
        result = {"repeats": args.repeats, "rows": rows, "samples": samples}
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
