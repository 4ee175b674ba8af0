"""TileKernels' own kernels, timed at our benchmark cases' shapes, beside tileaot's figures.

    python bench/tilekernels.py [--suite SUITE.json] [--out bench/results] [--match REGEX]
                                [--cache DIR] [--json PATH]

For every op tileaot shares with DeepSeek's TileKernels (`tile-kernels` 1.0.0: README's
"TileKernels counterparts" section, plus the ops landing on other branches), this calls
TileKernels' public function, JIT-compiled by TileLang on its first call, on inputs of the
shape of one of our bench/ops/*.py cases (the cases: bench/tk_cases.py). Times come from
bench/timing.py, the code that times our own cases (warm-up, L2 flushed by a read before each
repetition, CUDA events, median), so the two columns differ only in the kernel. The first call
(synchronised) is reported apart: with the default empty TileLang cache, the cold JIT compile.

With --suite (the JSON bench/suite.py wrote on the same machine), each row also gets our
median for the same case (label and size) and the ratio TileKernels / tileaot (> 1: ours is
faster). Writes <out>/<gpu>-<date>-tilekernels.json and .md. A case whose TileKernels function
cannot run (an option it lacks, a layout it does not take) is listed with the reason; a case
that fails is listed with its error. No GPU or no importable tile_kernels: one line, exit 0.
On the GPU machine: `bash scripts/gpu_check.sh tkbench` (tilelang and tile-kernels from the
carried tarball).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))  # timing, suite: also when imported by the tests

from suite import _version, gpu_slug  # noqa: E402
from timing import measure  # noqa: E402
from tk_cases import CASES, Case, Unavailable  # noqa: E402

README = ROOT / "README.md"
SWIGLU_MODULE = "tile_kernels.quant.swiglu_forward_and_per_token_cast_kernel"


def catalog_ops(readme: str | None = None) -> set[str]:
    """The tileaot ops of README's "TileKernels counterparts" section: every backticked name in
    the first column of its tables that names an op: `op` and `(+ `op_backward`, autograd)`."""
    text = README.read_text() if readme is None else readme
    section = text.split("### TileKernels counterparts", 1)[1].split("\n#", 1)[0]
    ops = set()
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) > 2:  # the cell's first name and those after "+ " (options are not ops)
            ops |= set(re.findall(r"(?:^|\+ )`([a-z0-9_]+)`", cells[1].strip()))
    return ops


# ---- running ---------------------------------------------------------------------------------


def _patch_swiglu(tk) -> None:
    """TILEKERNELS-H200.md's second fix: the SwiGLU + cast kernel allocates its clamp-count
    reducers (`T.alloc_reducer`) unconditionally but finalises them only under `count_clamp`,
    which TileLang 0.1.15 rejects; the module is reloaded from a copy of its source with the
    allocation under `if count_clamp:` too (the timed path, without counting, is unchanged).
    Loaded from a file, not a string: TileLang reads the kernel's source back."""
    spec = importlib.util.find_spec(SWIGLU_MODULE)
    source = Path(spec.origin).read_text()
    block = re.search(
        r"\n( +)count_silu = T\.alloc_reducer.*?T\.fill\(count_lower, 0\)\n", source, re.S
    )
    if block is None or "if count_clamp:\n" + block.group(1) + "    count_silu" in source:
        return  # a release where this is fixed (or different): leave it as it is
    indent = block.group(1)
    body = "".join(f"    {line}\n" if line else "\n" for line in block.group(0)[1:-1].split("\n"))
    patched = source.replace(block.group(0), f"\n{indent}if count_clamp:\n{body}", 1)
    folder = Path(tempfile.mkdtemp(prefix="tkbench-"))
    path = folder / Path(spec.origin).name
    path.write_text(patched)
    module_spec = importlib.util.spec_from_file_location(SWIGLU_MODULE, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[SWIGLU_MODULE] = module
    module_spec.loader.exec_module(module)
    tk.quant.swiglu_forward_and_per_token_cast = module.swiglu_forward_and_per_token_cast


class TileKernels:
    """tile_kernels' subpackages under short names, with both compatibility fixes applied."""

    def __init__(self):
        tilelang = importlib.import_module("tilelang")
        # TILEKERNELS-H200.md's first fix: 0.1.15 moved tilelang.utils.target.
        sys.modules.setdefault("tilelang.utils.target", tilelang.backend.target)
        started = time.perf_counter()
        importlib.import_module("tile_kernels")
        self.import_s = time.perf_counter() - started
        self.quant = importlib.import_module("tile_kernels.quant")
        self.moe = importlib.import_module("tile_kernels.moe")
        self.transpose = importlib.import_module("tile_kernels.transpose")
        self.engram = importlib.import_module("tile_kernels.engram")
        self.mhc_ops = importlib.import_module("tile_kernels.modeling.mhc.ops")
        _patch_swiglu(self)


def unavailable_here() -> str | None:
    """Why nothing can be timed on this machine, or None."""
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    for name in ("tilelang", "tile_kernels"):
        if importlib.util.find_spec(name) is None:
            return (
                f"{name} is not importable (on the GPU machine: bash scripts/gpu_check.sh tkbench)"
            )
    return None


def run_case(case: Case, tk) -> dict:
    """Times one case; its row (status ok, unavailable or failed)."""
    row = {"op": case.op, "label": case.label, "size": case.size, "note": case.note}
    try:
        torch.manual_seed(0)
        fn = case.make(tk)
        torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        row["first_call_s"] = time.perf_counter() - started
        t = measure(fn)
    except Unavailable as exc:
        return row | {"status": "unavailable", "reason": str(exc)}
    except Exception as exc:  # one broken case must not hide the others
        return row | {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:300]}
    return row | {"status": "ok", "tk_us": t.median_us, "reps": t.reps}


def attach_tileaot(rows: list[dict], suite: dict | None) -> None:
    """Adds our median (and the ratio) from the suite's JSON to the rows of the same case."""
    ours = {(k["op"], k["size"]): k.get("tileaot_us") for k in (suite or {}).get("kernels", [])}
    for row in rows:
        case = next(
            c for c in CASES if (c.op, c.label, c.size) == (row["op"], row["label"], row["size"])
        )
        us = ours.get((row["label"], row["size"]))
        if us is not None:
            row["tileaot_us"] = us
            if row.get("tk_us"):
                row["ratio"] = row["tk_us"] / us
        elif not case.bench_file.exists():
            row["tileaot_note"] = f"no {case.bench_file.relative_to(ROOT)} in this tree yet"
        elif suite is not None:
            row["tileaot_note"] = "not in the suite's JSON"


def _us(value) -> str:
    return "—" if value is None else f"{value:.1f}"


def render(result: dict) -> str:
    """The Markdown table of a result (bench/tilekernels.py's JSON)."""
    m = result["machine"]
    lines = [
        f"# TileKernels beside tileaot: {m.get('gpu')}, {result['date']}",
        "",
        f"`{result['command']}`; torch {m.get('torch')}, tilelang {m.get('tilelang')}, "
        f"tile-kernels {m.get('tile_kernels')}; `import tile_kernels` {result['import_s']:.1f} s.",
        "TileKernels µs: its public function on inputs of our bench case's shape, timed by "
        "bench/timing.py (median of CUDA-event times, L2 flushed before each repetition); "
        "first call: synchronised, JIT compile included when its cache was empty. "
        "Ratio = TileKernels / tileaot (> 1: tileaot faster); tileaot µs from "
        f"{result.get('suite') or 'no suite JSON (--suite)'}.",
        "",
        "| op | case | shape | tileaot µs | TileKernels µs | ratio | first call s | note |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        ratio = f"{r['ratio']:.2f}×" if r.get("ratio") else "—"
        first = f"{r['first_call_s']:.2f}" if r.get("first_call_s") is not None else "—"
        tk_us = _us(r.get("tk_us")) if r["status"] == "ok" else r["status"]
        note = "; ".join(x for x in (r.get("reason"), r.get("note"), r.get("tileaot_note")) if x)
        lines.append(
            f"| {r['op']} | {r['label'] or '—'} | {r['size']} | {_us(r.get('tileaot_us'))} "
            f"| {tk_us} | {ratio} | {first} | {note.replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def write(result: dict, out_dir: Path) -> Path:
    """<gpu>-<date>-tilekernels.json and .md; returns the JSON's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{gpu_slug(result['machine'].get('gpu'))}-{result['date']}-tilekernels"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    stem.with_suffix(".md").write_text(render(result))
    return stem.with_suffix(".json")


def _report(row: dict) -> None:
    us = _us(row.get("tk_us")) if row["status"] == "ok" else row["status"]
    line = f"[tkbench] {row['op']:28s} {row['size']:18s} {us:>10s} {row.get('reason', '')}"
    print(line.rstrip(), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", help="bench/suite.py's JSON: our figures for the same cases")
    parser.add_argument("--out", default=str(BENCH / "results"), help="where the tables go")
    parser.add_argument("--match", default=".", help="only ops (or case labels) matching this")
    parser.add_argument("--cache", help="TileLang cache (default: empty, so first calls compile)")
    parser.add_argument("--json", help="also write the result here (a suite-style step)")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    why = unavailable_here()
    if why:
        print(f"[tkbench] skipped: {why}")
        return 0
    suite = json.loads(Path(args.suite).read_text()) if args.suite else None
    # Read by tilelang when it is imported: an empty folder makes every first call a cold JIT.
    os.environ["TILELANG_CACHE_DIR"] = args.cache or tempfile.mkdtemp(prefix="tkbench-tl-")
    try:
        tk = TileKernels()
    except ImportError as exc:
        print(f"[tkbench] skipped: tile_kernels does not import ({type(exc).__name__}: {exc})")
        return 0
    result = {
        "schema": 1,
        "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "command": " ".join(["python", "bench/tilekernels.py", *argv]),
        "suite": args.suite,
        "import_s": tk.import_s,
        "machine": {
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "tilelang": _version("tilelang"),
            "tile_kernels": _version("tile-kernels"),
        },
        "rows": [],
    }
    path = write(result, Path(args.out))
    for case in CASES:
        if re.search(args.match, case.op) or re.search(args.match, case.label or ""):
            result["rows"].append(run_case(case, tk))
            _report(result["rows"][-1])
            attach_tileaot(result["rows"], suite)
            path = write(result, Path(args.out))  # after every case: a timeout keeps the rest
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(f"[tkbench] wrote {path} and {path.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
