"""How close engram_gate_backward's gradients sit to TileKernels' test bound (calc_diff < 1e-8),
ours and TileKernels' own kernel on the same draws (GPU; needs tilelang + tile-kernels, e.g.
`bash scripts/gpu_check.sh with_tilelang python bench/engram_bound_probe.py`).

For each shape and seed: the data of TileKernels' engram tests (randn bf16, eps 1e-20, clamp
1e-6), autograd of its reference as the oracle; ours fed the statistics its reference forward
saved (as tests/test_gpu_engram_gate.py does), TileKernels' through its autograd Function.
Prints the worst calc_diff per gradient over the seeds and how many seeds passed 1e-8.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import torch


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """TileKernels' test metric itself (`tile_kernels.testing.numeric`), imported after
    `tile_kernels()` has made the package importable."""
    return float(importlib.import_module("tile_kernels.testing.numeric").calc_diff(x, y))


def tile_kernels():
    tilelang = importlib.import_module("tilelang")
    sys.modules.setdefault("tilelang.utils.target", tilelang.backend.target)
    ref = importlib.import_module("tile_kernels.torch.engram").engram_gate_ref
    fn = importlib.import_module("tile_kernels.modeling.engram.engram_gate").engram_gate
    return ref, fn


def one_draw(shape, seed, ref, tk_fn):
    import tileaot

    tokens, hc, hidden = shape
    torch.manual_seed(seed)
    x, k = (torch.randn(tokens, hc, hidden, dtype=torch.bfloat16, device="cuda") for _ in "xk")
    v = torch.randn(tokens, hidden, dtype=torch.bfloat16, device="cuda")
    wh, we = (torch.randn(hc, hidden, dtype=torch.bfloat16, device="cuda") for _ in "he")
    go = torch.randn_like(x)
    leaves = [x.clone(), k.clone(), v.clone(), wh.float(), we.float()]
    for t in leaves:
        t.requires_grad_(True)
    want, *saved = ref(*leaves, 1e-6, 1e-20, save_for_backward=True)
    saved = [t.detach().contiguous() for t in saved]
    want.backward(go)
    oracle = [t.grad for t in leaves]
    ours = tileaot.engram_gate_backward(go, x, k, v[:, None], wh, we, saved=saved, clamp_value=1e-6)
    theirs = [float("nan")] * 5  # TileKernels' backward kernel serves hc = 4 only (it asserts)
    if tk_fn is not None and hc == 4:
        tk_leaves = [t.clone().requires_grad_(True) for t in (x, k, v, wh, we)]
        tk_fn(*tk_leaves, 1e-6, 1e-20).backward(go)
        pairs = zip(tk_leaves, oracle, strict=True)
        theirs = [calc_diff(t.grad.reshape(o.shape), o) for t, o in pairs]
    rows = {}
    for name, a, o, b in zip("x k v wh we".split(), ours, oracle, theirs, strict=True):
        rows[name] = (calc_diff(a.reshape(o.shape), o), b)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--bound", type=float, default=1e-8)
    parser.add_argument("--shapes", nargs="*", default=["63x4x4096", "257x4x4096", "1023x4x4096",
                        "4096x4x4096", "1023x1x7168"], help="TOKENSxHCxHIDDEN")  # fmt: skip
    parser.add_argument("--ours-only", action="store_true", help="skip TileKernels' kernel")
    args = parser.parse_args()
    ref, tk_fn = tile_kernels()
    tk_fn = None if args.ours_only else tk_fn
    shapes = [tuple(int(d) for d in s.split("x")) for s in args.shapes]
    print(f"engram_gate_backward vs autograd of TileKernels' reference, {args.seeds} seeds each")
    print(f"{'shape':>16} grad  ours worst  ours ok  TK worst  TK ok")
    for shape in shapes:
        worst = {}
        for seed in range(args.seeds):
            for name, pair in one_draw(shape, seed, ref, tk_fn).items():
                worst.setdefault(name, []).append(pair)
        for name, pairs in worst.items():
            ours = [p[0] for p in pairs]
            theirs = [p[1] for p in pairs if p[1] == p[1]]  # NaN: not run
            ok_ours = sum(d < args.bound for d in ours)
            ok_theirs = sum(d < args.bound for d in theirs)
            tk_worst = max(theirs, default=float("nan"))
            label = "x".join(map(str, shape))
            print(f"{label:>16} {name:>4} {max(ours):10.3e} {ok_ours:4d}/{len(ours)} "
                  f"{tk_worst:9.3e} {ok_theirs:4d}/{len(theirs)}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
