"""Host cost per call of the Python layer, on the CPU: a wrapper before and after a change.

    python bench/host_cost_cpu.py [--before REV] [--ops OP,...] [--calls 20000] [--bursts 9]
        [--json F]

The ops' wrappers run against a module-typed stand-in for `tileaot._C` whose `call` (the short
path) and `launch` (the checked path) return at once, on CPU tensors counted as CUDA device 0
(`_validate.device_index` patched, as the CPU tests do). What is timed is therefore what a
wrapper itself adds per call in Python: guards, output allocation with torch, argument tuples,
the checks of the checked path. The driver's own cost (the real `_C.call`, cuLaunchKernel) is
measured on the GPU (bench/host_calls.py). The same calls run through the wrapper modules of
git revision REV (default: the last commit before the op schema, 053856e) loaded beside the
current ones, interleaved burst by burst, so both see the same machine load; each figure is the
median over bursts of (burst wall time / calls).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import tileaot  # noqa: E402
from tileaot import _lib, _validate  # noqa: E402

OPS = ("rms_norm", "gemm", "swiglu")  # the default --ops
# The short path's learned key of each op's calls below, where it is not (op, torch.bfloat16).
FAST_KEYS = {
    "per_token_cast_fp8": ("per_token_cast_fp8", torch.bfloat16, 128),
    "per_token_cast_fp4": ("per_token_cast_fp4", torch.bfloat16, 32, "ue8m0"),
    "swiglu_per_token_cast_fp8": ("swiglu_per_token_cast_fp8", "weights"),
    "cast_back": ("cast_back_fp8", torch.bfloat16, "g128"),
}


def _stand_in() -> types.ModuleType:
    c = types.ModuleType("tileaot._C")
    c.lookup = lambda op, key: 7
    c.launch = lambda *args: None
    c.call = lambda handle, tensors, scalars, outputs: True
    return c


def _old_module(op: str, rev: str, folder: Path) -> types.ModuleType:
    """tileaot.<op> as it was at `rev`, loaded as tileaot._before_<op>."""
    text = subprocess.run(
        ["git", "show", f"{rev}:python/tileaot/{op}.py"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    path = folder / f"_before_{op}.py"
    path.write_bytes(text)
    spec = importlib.util.spec_from_file_location(f"tileaot._before_{op}", path)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "tileaot"
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _calls(fn_of: dict) -> dict:
    """op -> (short-path call, checked-path call) with `out=` given, for the functions in fn_of."""
    bf = torch.bfloat16
    x, w, y = (
        torch.randn(4, 4096, dtype=bf),
        torch.ones(4096, dtype=bf),
        torch.empty(4, 4096, dtype=bf),
    )
    a, b, c = (
        torch.randn(4, 4096, dtype=bf),
        torch.randn(256, 4096, dtype=bf),
        torch.empty(4, 256, dtype=bf),
    )
    xs, ys = torch.randn(4, 2 * 2048, dtype=bf), torch.empty(4, 2048, dtype=bf)
    x3, y3 = x.view(2, 2, 4096), y.view(2, 2, 4096)  # 3-D: the short path's guard sends it on
    f8, f32 = torch.float8_e4m3fn, torch.float32
    q, s = torch.empty(4, 4096, dtype=f8), torch.empty(4, 32, dtype=f32)
    sb, s1 = torch.empty(1, 32, dtype=f32), torch.empty(4, 1, dtype=f32)
    qh, sh, rw = torch.empty(4, 2048, dtype=f8), torch.empty(4, 16, dtype=f32), torch.rand(4)
    c4, e4 = torch.empty(4, 2048, dtype=torch.uint8), torch.empty(4, 128, dtype=torch.uint8)
    t3 = torch.empty(1, 4096, 4, dtype=bf)
    return {
        "per_token_cast_fp8": (
            lambda: fn_of["per_token_cast_fp8"](x, out=(q, s)),
            lambda: fn_of["per_token_cast_fp8"](x, 4096, out=(q, s1)),
        ),
        "per_block_cast_fp8": (lambda: fn_of["per_block_cast_fp8"](x, out=(q, sb)), None),
        "per_token_cast_fp4": (lambda: fn_of["per_token_cast_fp4"](x, out=(c4, e4)), None),
        "swiglu_per_token_cast_fp8": (
            lambda: fn_of["swiglu_per_token_cast_fp8"](xs, rw, out=(qh, sh)),
            lambda: fn_of["swiglu_per_token_cast_fp8"](xs, out=(qh, sh)),
        ),
        "cast_back": (
            lambda: fn_of["cast_back"](q, s, out=y),
            lambda: fn_of["cast_back"](q, s, group_size=128, out=y),
        ),
        "transpose": (
            lambda: fn_of["transpose"](x.view(1, 4, 4096), out=t3),
            lambda: fn_of["transpose"](x, out=t3.view(4096, 4)),
        ),
        "rms_norm": (
            lambda: fn_of["rms_norm"](x, w, 1e-6, out=y),
            lambda: fn_of["rms_norm"](x3, w, 1e-6, out=y3),
        ),
        "gemm": (lambda: fn_of["gemm"](a, b, out=c), None),
        "swiglu": (
            lambda: fn_of["swiglu"](xs, out=ys),
            lambda: fn_of["swiglu"](xs.view(2, 2, 4096), out=ys.view(2, 2, 2048)),
        ),
    }


def _per_call(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="053856e")
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated public ops")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--bursts", type=int, default=9)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    _lib._native = _stand_in()
    _lib.current_stream = lambda device: 0x1000
    _validate.device_index = lambda name, t: 0
    ops = tuple(args.ops.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        old = {op: getattr(_old_module(op, args.before, Path(tmp)), op) for op in ops}
        new = {op: getattr(tileaot, op) for op in ops}
        runs = {"before": _calls(old), "after": _calls(new)}
        for calls in runs.values():  # the checked path first: it `learn`s nothing (stand-in)
            for op in ops:
                for fn in calls[op]:
                    if fn is not None:
                        fn()
        # `learn` only trusts a real module: let every short path hit.
        for op in ops:
            _lib._fast[FAST_KEYS.get(op, (op, torch.bfloat16))] = 7
        rows = []
        for op in ops:
            for path, index in (("short path", 0), ("checked path", 1)):
                if runs["after"][op][index] is None:
                    continue
                times = {"before": [], "after": []}
                for _ in range(args.bursts):
                    for which in ("before", "after"):
                        times[which].append(_per_call(runs[which][op][index], args.calls))
                med = {k: statistics.median(v) for k, v in times.items()}
                rows.append({"op": op, "path": path, **med, "ratio": med["after"] / med["before"]})
    width = max(len(op) for op in ops)
    print(f"{'op':<{width}} {'path':<13} {'before us':>10} {'after us':>10} {'ratio':>7}")
    for r in rows:
        before, after = f"{r['before']:>10.2f}", f"{r['after']:>10.2f}"
        print(f"{r['op']:<{width}} {r['path']:<13} {before} {after} {r['ratio']:>7.3f}")
    if args.json:
        args.json.write_text(json.dumps({"before": args.before, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
