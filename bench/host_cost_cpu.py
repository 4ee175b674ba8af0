"""Host cost per call of the Python layer, on the CPU: a wrapper before and after a change.

    python bench/host_cost_cpu.py [--before REV] [--calls 20000] [--bursts 9] [--json F]

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

OPS = ("rms_norm", "gemm", "swiglu")


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
    return {
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
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--bursts", type=int, default=9)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    _lib._native = _stand_in()
    _lib.current_stream = lambda device: 0x1000
    _validate.device_index = lambda name, t: 0
    with tempfile.TemporaryDirectory() as tmp:
        old = {op: getattr(_old_module(op, args.before, Path(tmp)), op) for op in OPS}
        new = {op: getattr(tileaot, op) for op in OPS}
        runs = {"before": _calls(old), "after": _calls(new)}
        for calls in runs.values():  # the checked path first: it `learn`s nothing (stand-in)
            for op in OPS:
                for fn in calls[op]:
                    if fn is not None:
                        fn()
        # `learn` only trusts a real module: let every short path hit.
        for op in OPS:
            key = (op, torch.bfloat16)
            _lib._fast[key] = 7
        rows = []
        for op in OPS:
            for path, index in (("short path", 0), ("checked path", 1)):
                if runs["after"][op][index] is None:
                    continue
                times = {"before": [], "after": []}
                for _ in range(args.bursts):
                    for which in ("before", "after"):
                        times[which].append(_per_call(runs[which][op][index], args.calls))
                med = {k: statistics.median(v) for k, v in times.items()}
                rows.append({"op": op, "path": path, **med, "ratio": med["after"] / med["before"]})
    print(f"{'op':<10} {'path':<13} {'before us':>10} {'after us':>10} {'ratio':>7}")
    for r in rows:
        before, after = f"{r['before']:>10.2f}", f"{r['after']:>10.2f}"
        print(f"{r['op']:<10} {r['path']:<13} {before} {after} {r['ratio']:>7.3f}")
    if args.json:
        args.json.write_text(json.dumps({"before": args.before, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
