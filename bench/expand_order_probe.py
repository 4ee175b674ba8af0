"""Design probe for moe_expand's copy: does the order of the writes, or an L2 hint, move it?

    python bench/expand_order_probe.py [--json probe.json]      (needs nvcc; builds
                                                                 bench/native/expand_order.cu)

Raw CUDA kernels (not tileaot's) moving moe_expand's bytes at the catalog's size (T = 32768,
H = 7168 bf16, K = 8, top-k routing over E = 256, alignment 1; x read once from DRAM, each
routed row written once), with the copy and fill ceilings measured in the same process:

* scatter: one block per token loads its row and stores it to its K rows (tileaot's copy
  before session 7): the blocks in flight write into all E expert regions at once;
* gather over a work list of entries in three orders: token order (the scatter's writes, one
  row per block), windows of W tokens walked expert by expert (each window's rows of x are
  read K times: from L2 after the first, if they stay there), and expert order (the W = T
  extreme: x re-read from DRAM);
* each with L2 eviction hints on the loads (evict-last) and / or the stores (evict-first,
  st.global.cs).

Every gather's output is checked against the scatter's (bit for bit). Bytes per case: x once
plus every routed row once (T + T*K rows of H bf16). Medians of CUDA-event timings with L2
emptied before each (bench/timing.py). Results: bench/results/2026-11-29-h200-tuning.md,
"Session 7".
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import ceilings
import torch
from timing import rate_row

T, H, K, E = 32768, 7168, 8, 256
HINTS = {
    0: "plain",
    1: "ld evict-last",
    2: "st evict-first",
    3: "ld evict-last + st evict-first",
    4: "st.cs",
    5: "ld evict-last + st.cs",
}
SOURCE = Path(__file__).resolve().parent / "native" / "expand_order.cu"


def build_shared(source: Path, work: Path) -> ctypes.CDLL:
    """`source` compiled by nvcc for this GPU into a shared library in `work`, loaded."""
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nvcc = shutil.which("nvcc") or shutil.which(f"{cuda_home}/bin/nvcc")
    if not nvcc:
        raise SystemExit(f"{source.name}: no nvcc on PATH or in $CUDA_HOME/bin")
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}" + ("a" if major >= 9 else "")
    lib = work / f"{source.stem}.so"
    cmd = [nvcc, "-O3", f"-arch={arch}", "-shared", "-Xcompiler", "-fPIC", "-o", str(lib)]
    subprocess.run([*cmd, str(source)], check=True)
    return ctypes.CDLL(str(lib))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        lib = build_shared(SOURCE, Path(work))
        rows = run(lib)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def run(lib: ctypes.CDLL) -> dict:
    facts = ceilings.device_facts() | ceilings.copy_ceiling() | ceilings.write_ceiling()
    copy_gbs = facts["copy_gbs"]
    print(f"{facts['gpu']}: copy {copy_gbs:.0f} GB/s, fill {facts['write_gbs']:.0f} GB/s")
    torch.manual_seed(0)
    x = torch.randn(T, H, device="cuda").bfloat16()
    flat = torch.rand(T, E, device="cuda").topk(K, dim=-1).indices.flatten()
    n = T * K
    entries = torch.arange(n, device="cuda")
    pos = torch.empty(n, dtype=torch.long, device="cuda")
    pos[torch.sort(flat, stable=True).indices] = entries  # rows by expert, then entry
    pos32 = pos.int()
    nbytes = (T + n) * H * 2
    out, ref = (torch.empty(n, H, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    ptr = ctypes.c_void_p

    def stream():
        return ptr(torch.cuda.current_stream().cuda_stream)

    def scatter(hint, o):
        args = (ptr(x.data_ptr()), ptr(pos32.data_ptr()), ptr(o.data_ptr()), T, K, stream())
        return lib.expand_scatter(hint, *args)

    def gather(work, hint, rows_per_block, o):
        args = (ptr(x.data_ptr()), ptr(work.data_ptr()), ptr(pos32.data_ptr()), ptr(o.data_ptr()))
        return lib.expand_gather(hint, rows_per_block, *args, n, K, stream())

    results = []

    def rate(name, fn):
        results.append(rate_row(name, fn, nbytes, copy_gbs))

    for hint in (0, 2, 4):
        rate(f"scatter, {HINTS[hint]}", lambda hint=hint: scatter(hint, out))
    scatter(0, ref)

    def work(key):  # entries sorted by key, stable: ascending token inside equal keys
        return entries[torch.sort(key, stable=True).indices].int()

    token = entries // K
    orders = {"token order": (work(torch.zeros_like(flat)), (0, 1, 2, 3, 4, 5), (1,))}
    for w in (128, 256, 512, 1024, 2048, 4096):
        hints, rows = ((0, 1, 2, 3, 4, 5), (1, 2)) if w in (256, 512) else ((0, 3), (1, 2))
        orders[f"window {w}"] = (work((token // w) * E + flat), hints, rows)
    orders["expert order"] = (work(flat), (0, 3), (1,))
    for order, (wl, hints, rows) in orders.items():
        for hint in hints:
            for r in rows:
                out.fill_(0)
                gather(wl, hint, r, out)
                ok = torch.equal(out, ref)
                name = f"gather {order}, {HINTS[hint]}, {r} row(s)/block"
                name += "" if ok else " WRONG OUTPUT"
                rate(name, lambda wl=wl, hint=hint, r=r: gather(wl, hint, r, out))
    return facts | {"bytes": nbytes, "rows": results}


if __name__ == "__main__":
    sys.exit(main())
