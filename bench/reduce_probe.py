"""Design probe for moe_reduce: is it at the read ceiling, and would hints or deeper loads help?

    python bench/reduce_probe.py [--json probe.json]     (needs nvcc; builds
                                                          bench/native/reduce_gather.cu)

At the catalog's size (T = 32768, H = 7168 bf16, K = 8, top-k routing over E = 256,
alignment 16, weighted), in one process: the copy ceiling, a read ceiling (``sum`` of a 2 GiB
float32 tensor), tileaot.moe_reduce, and raw CUDA versions of the same gather-sum with 2, 4
or 8 slots' loads in flight per thread and with cache hints on the loads (L1 no-allocate,
L2 evict-first; ld.global.nc). Each under the routing moe_expand produces and with rows
ascending (``token_pos = t * K + j``: the reads sequential). The raw kernels' outputs are
checked against tileaot's for the top-k routing (same FMA order: bit for bit).

Bytes: y's routed rows read once, out written once, token_pos and weights read. Medians of
CUDA-event timings with L2 emptied before each (bench/timing.py). Results:
bench/results/2026-11-29-h200-tuning.md, "Session 7".
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import tempfile
from pathlib import Path

import ceilings
import tileaot
import torch
from expand_order_probe import build_shared
from timing import measure, rate_row

T, H, K, E, ALIGN = 32768, 7168, 8, 256, 16
SOURCE = Path(__file__).resolve().parent / "native" / "reduce_gather.cu"
CANDIDATES = ((0, 2), (0, 4), (0, 8), (1, 2), (1, 4), (2, 2), (2, 4))  # (hint, slots in flight)
HINTS = {0: "plain", 1: "no-allocate + evict-first", 2: "ld.global.nc no-allocate"}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        result = run(build_shared(SOURCE, Path(work)))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


def read_ceiling() -> dict:
    big = torch.randn(2**29, device="cuda")  # 2 GiB of float32
    return {"read_gbs": big.numel() * 4 / measure(lambda: big.sum()).median_us / 1e3}


def run(lib: ctypes.CDLL) -> dict:
    facts = ceilings.device_facts() | ceilings.copy_ceiling() | read_ceiling()
    copy_gbs = facts["copy_gbs"]
    print(f"{facts['gpu']}: copy {copy_gbs:.0f} GB/s, read (sum) {facts['read_gbs']:.0f} GB/s")
    torch.manual_seed(0)
    idx = torch.rand(T, E, device="cuda").topk(K, dim=-1).indices.int()
    x = torch.randn(T, H, device="cuda").bfloat16()
    topk_pos = tileaot.moe_expand(x, idx, E, ALIGN).token_pos
    rows = T * K + E * (ALIGN - 1)
    y = torch.randn(rows, H, device="cuda").bfloat16()
    w = torch.rand(T, K, device="cuda")
    ascending = torch.arange(T * K, device="cuda", dtype=torch.int32).view(T, K)
    nbytes = (T * K + T) * H * 2 + 2 * T * K * 4
    out = torch.empty(T, H, device="cuda", dtype=torch.bfloat16)
    ref = tileaot.moe_reduce(y, topk_pos, w)
    ptr = ctypes.c_void_p
    results = []

    def rate(name, fn):
        results.append(rate_row(name, fn, nbytes, copy_gbs))

    for routing, pos in (("top-k E 256", topk_pos), ("rows ascending", ascending)):
        rate(
            f"tileaot.moe_reduce, {routing}", lambda pos=pos: tileaot.moe_reduce(y, pos, w, out=out)
        )
        tensors = (ptr(y.data_ptr()), ptr(pos.data_ptr()), ptr(w.data_ptr()), ptr(out.data_ptr()))
        for hint, group in CANDIDATES:

            def call(hint=hint, group=group, tensors=tensors):
                stream = ptr(torch.cuda.current_stream().cuda_stream)
                return lib.reduce_gather(hint, group, *tensors, T, K, rows, stream)

            out.zero_()
            call()
            same = routing != "top-k E 256" or torch.equal(out, ref)
            name = f"raw, {HINTS[hint]}, {group} slots in flight, {routing}"
            rate(name + ("" if same else " DIFFERS FROM TILEAOT"), call)
    return facts | {"bytes": nbytes, "rows": results}


if __name__ == "__main__":
    sys.exit(main())
