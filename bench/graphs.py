"""CUDA-graph capture of tileaot calls: replay equals eager, and what replay saves per block.

    python bench/graphs.py [--iters 500] [--json graphs.json]

The block is a decode-sized MLP step on 16 tokens, five tileaot launches with `out=`:
rms_norm → gemm (up, 4096 → 2·2048) → swiglu → gemm (down, 2048 → 4096) → per_token_cast_fp8.
It is captured once in a torch.cuda.CUDAGraph; replay must give bit-for-bit the eager outputs,
on the captured inputs and again after new values are copied into them. Times are per block,
`iters` blocks back to back between two CUDA events (GPU time including the gaps the host
leaves), for eager calls and for replays, plus the host's wall time per eager block.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import tileaot
import torch

TOKENS, HIDDEN, INTER = 16, 4096, 2048
LAUNCHES = 5


def make_buffers() -> dict[str, torch.Tensor]:
    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda") * scale).bfloat16()

    def empty(*shape, dtype=torch.bfloat16):
        return torch.empty(*shape, dtype=dtype, device="cuda")

    return {
        "x": randn(TOKENS, HIDDEN),
        "w_norm": randn(HIDDEN),
        "w_up": randn(2 * INTER, HIDDEN, scale=HIDDEN**-0.5),
        "w_down": randn(HIDDEN, INTER, scale=INTER**-0.5),
        "h": empty(TOKENS, HIDDEN),
        "gu": empty(TOKENS, 2 * INTER),
        "a": empty(TOKENS, INTER),
        "o": empty(TOKENS, HIDDEN),
        "q": empty(TOKENS, HIDDEN, dtype=torch.float8_e4m3fn),
        "s": empty(TOKENS, HIDDEN // 128, dtype=torch.float32),
    }


def block(b: dict[str, torch.Tensor]) -> None:
    tileaot.rms_norm(b["x"], b["w_norm"], 1e-6, out=b["h"])
    tileaot.gemm(b["h"], b["w_up"], out=b["gu"])
    tileaot.swiglu(b["gu"], out=b["a"])
    tileaot.gemm(b["a"], b["w_down"], out=b["o"])
    tileaot.per_token_cast_fp8(b["o"], out=(b["q"], b["s"]))


OUTPUTS = ("h", "gu", "a", "o", "q", "s")


def capture(b: dict[str, torch.Tensor]) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream: handles, cubins loaded
        for _ in range(2):
            block(b)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        block(b)
    return graph


def replay_equals_eager(graph: torch.cuda.CUDAGraph, b: dict[str, torch.Tensor]) -> bool:
    """Eager outputs, then outputs poisoned and the graph replayed: equal bit for bit?"""
    block(b)
    expected = [b[name].clone() for name in OUTPUTS]
    for name in OUTPUTS:
        b[name].view(torch.uint8).fill_(0xFF)  # NaN in every float type: unwritten shows
    graph.replay()
    torch.cuda.synchronize()
    return all(
        torch.equal(b[name].view(torch.uint8), want.view(torch.uint8))
        for name, want in zip(OUTPUTS, expected, strict=True)
    )


def per_block_us(fn, iters: int) -> tuple[float, float]:
    """(GPU µs, host wall µs) per call of `fn`, `iters` calls back to back, after a warm-up."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    wall = time.perf_counter()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    wall = time.perf_counter() - wall
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / iters, wall * 1e6 / iters


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=500)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    b = make_buffers()
    graph = capture(b)
    same = replay_equals_eager(graph, b)
    b["x"].copy_(torch.randn_like(b["x"], dtype=torch.float32))  # new values, same tensor
    same = same and replay_equals_eager(graph, b)
    eager_us, eager_host_us = per_block_us(lambda: block(b), args.iters)
    replay_us, replay_host_us = per_block_us(graph.replay, args.iters)
    result = {
        "block": (
            f"{TOKENS} tokens: rms_norm → gemm {HIDDEN}→{2 * INTER} → swiglu → gemm "
            f"{INTER}→{HIDDEN} → per_token_cast_fp8 (bf16, out=)"
        ),
        "launches": LAUNCHES,
        "iters": args.iters,
        "replay_equals_eager": same,
        "eager_us": eager_us,
        "eager_host_us": eager_host_us,
        "replay_us": replay_us,
        "replay_host_us": replay_host_us,
    }
    print(json.dumps(result, indent=1, ensure_ascii=False))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, ensure_ascii=False))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
