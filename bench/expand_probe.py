"""What bounds moe_expand: its traffic (read a row once, write it k times) under other codes.

    python bench/expand_probe.py [--json probe.json]

In one process, at the catalog's size (T = 32768, H = 7168 bf16, k = 8, E = 256, alignment 16):

* ceilings: device-to-device copy (bytes read + written) and a write-only fill;
* torch's broadcast copy ``out.view(T, k, H).copy_(x[:, None].expand(T, k, H))`` (the same
  bytes with every write sequential; torch's strided copy is slow, so only a reference);
* tileaot.moe_expand under routings that change only where the written rows lie: top-k
  (the benchmark case, and E = 8, 64, 1024), rows ascending (``token_pos = t * k + j``: each
  block writes k adjacent rows, blocks in row order), one expert per token (k adjacent rows
  per block, blocks scattered over the experts), and k = 1 (a row permutation).

Bytes as in bench/ops/moe_expand.py (x once, every routed and padding row once, idx and
token_pos). Medians of CUDA-event timings with L2 emptied before each (bench/timing.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import ceilings
import tileaot
import torch
from ops.moe_expand import moved_bytes
from timing import measure

T, H, K, E, ALIGN = 32768, 7168, 8, 256, 16


def _rate(name: str, us: float, nbytes: int, copy_gbs: float) -> dict:
    gbs = nbytes / us / 1e3
    print(f"{name:<44} {us:9.1f} us {gbs:7.0f} GB/s {100 * gbs / copy_gbs:5.1f} % of copy")
    return {"name": name, "us": us, "bytes": nbytes, "gbs": gbs, "pct_copy": 100 * gbs / copy_gbs}


def _moe_expand(name, x: torch.Tensor, idx: torch.Tensor, experts: int, copy_gbs: float) -> dict:
    t = measure(lambda: tileaot.moe_expand(x, idx, experts, ALIGN))
    return _rate(name, t.median_us, moved_bytes(x, idx, experts, ALIGN), copy_gbs)


def _topk(experts: int, k: int = K) -> torch.Tensor:
    return torch.rand(T, experts, device="cuda").topk(k, dim=-1).indices.int()


def _routings():
    """(name, idx, experts): the benchmark's routing, then ones that change only where the
    written rows lie."""
    yield "moe_expand, top-k routing (E 256)", _topk(E), E
    for experts in (8, 64, 1024):
        yield f"moe_expand, top-k routing, E {experts}", _topk(experts), experts
    flat = torch.arange(T * K, device="cuda")
    # token_pos = t * K + j: every block writes K adjacent rows, blocks in row order
    yield "moe_expand, rows ascending", (flat * E // (T * K)).int().view(T, K), E
    # all K slots of a token to one random expert: K adjacent rows per block, blocks scattered
    one = torch.randint(0, E, (T, 1), device="cuda", dtype=torch.int32)
    yield "moe_expand, one expert per token", one.expand(T, K).contiguous(), E
    yield "moe_expand, k = 1 (row permutation)", one, E


def _broadcast(x: torch.Tensor, copy_gbs: float) -> dict:
    out = torch.empty(T, K, H, device="cuda", dtype=x.dtype)
    t = measure(lambda: out.copy_(x[:, None].expand(T, K, H)))
    nbytes = (1 + K) * x.numel() * x.element_size()
    return _rate("torch broadcast copy (k sequential writes)", t.median_us, nbytes, copy_gbs)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    facts = ceilings.device_facts() | ceilings.copy_ceiling() | ceilings.write_ceiling()
    copy_gbs = facts["copy_gbs"]
    print(f"{facts['gpu']}: copy {copy_gbs:.0f} GB/s, fill {facts['write_gbs']:.0f} GB/s")
    x = torch.randn(T, H, device="cuda").bfloat16()
    rows = []

    rows.append(_broadcast(x, copy_gbs))
    for name, idx, experts in _routings():
        rows.append(_moe_expand(name, x, idx, experts, copy_gbs))

    if args.json:
        Path(args.json).write_text(json.dumps(facts | {"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
