"""The Markdown page of a suite result (the JSON bench/suite.py writes).

    python bench/report.py RESULT.json [-o RESULT.md]

Sections: what ran and how long; the targets, met or missed; ceilings; kernel time per op and
size (tileaot, torch eager, TileLang JIT); host overhead per call; cold start; CUDA graphs.
Pure formatting of the JSON: runs anywhere, no GPU, no torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cold_start import TORCH_ROW
from targets import evaluate

DASH = "—"


def _num(value, spec: str = ".1f") -> str:
    return DASH if value is None else format(value, spec)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    cells = ([str(c).replace("|", "\\|") for c in row] for row in rows)  # a | ends a cell
    return lines + ["| " + " | ".join(row) + " |" for row in cells]


def _met(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "not measured"}[met]


def header(result: dict) -> list[str]:
    m, s = result.get("machine", {}), result["suite"]
    gpu = m.get("gpu", "GPU unknown")
    lines = [f"# {gpu}, {result['date']}: benchmark suite (issue 4)", ""]
    facts = [
        f"torch {m.get('torch', '?')} (CUDA {m.get('cuda', '?')})",
        f"tilelang {m.get('tilelang') or 'not importable'}",
        f"tileaot {m.get('tileaot', '?')}",
        f"Python {m.get('python', '?')}",
    ]
    if m.get("commit"):
        facts.append(f"commit {m['commit']}")
    lines.append(f"- Machine: {gpu}; " + ", ".join(facts) + ".")
    if m.get("nvidia_smi"):
        lines.append(f"- nvidia-smi: {m['nvidia_smi']}")
    quick = " (`--quick`: a smoke run, fewer cases and repeats)" if s.get("quick") else ""
    lines.append(f"- Command: `{s['command']}`{quick}; {s['elapsed_s']:.0f} s in all.")
    lines.append(
        "- Kernel times: median of ≥ 30 repetitions timed with CUDA events after a warm-up, L2 "
        "emptied before each by reading a buffer 4× its size (bench/timing.py)."
    )
    return lines + [""]


def steps_section(result: dict) -> list[str]:
    rows = [
        [name, step["status"], _num(step.get("seconds"), ".0f"), step.get("note", "")]
        for name, step in result.get("steps", {}).items()
    ]
    return ["## Steps (each its own process)", "", *_table(["step", "status", "s", "note"], rows)]


def targets_section(result: dict) -> list[str]:
    rows = [[t["target"], t["measured"], _met(t["met"])] for t in evaluate(result)]
    return ["## Targets", "", *_table(["target", "measured", "verdict"], rows)]


def ceilings_section(result: dict) -> list[str]:
    c = result.get("ceilings") or {}
    if not c:
        return ["## Ceilings", "", "Not measured (see Steps)."]
    return [
        "## Ceilings",
        "",
        f"- Device-to-device copy (2 GiB, bytes read + written): **{c['copy_gbs']:.0f} GB/s**.",
        f"- torch bf16 matmul {c['matmul_size']}: {c['matmul_us']:.1f} µs = "
        f"**{c['matmul_tflops']:.1f} TFLOP/s**.",
    ]


def _rate(row: dict, us: float | None, ceilings: dict) -> tuple[str, str]:
    """(rate, % of its ceiling): GB/s of copy for memory-bound rows, TFLOP/s of matmul else."""
    if us is None:
        return DASH, DASH
    if row.get("bytes"):
        gbs = row["bytes"] / us / 1e3
        ceiling = ceilings.get("copy_gbs")
        return f"{gbs:.0f} GB/s", _num(ceiling and 100 * gbs / ceiling, ".0f")
    tflops = row["flops"] / us / 1e6
    ceiling = ceilings.get("matmul_tflops")
    return f"{tflops:.1f} TFLOP/s", _num(ceiling and 100 * tflops / ceiling, ".0f")


def _kernel_row(row: dict, ceilings: dict) -> list[str]:
    if "error" in row:
        return [row["op"], row["size"], DASH, f"failed: {row['error'][:80]}"] + [DASH] * 7
    rate, pct = _rate(row, row["tileaot_us"], ceilings)
    jit_us, jit_ours = row.get("tilelang_jit_us"), row.get("jit_tileaot_us")
    ratio = _num(jit_ours / jit_us, ".3f") if jit_us else row.get("jit_error", DASH)[:60]
    identical = {True: "yes", False: "**no**", None: DASH}[row.get("bit_identical")]
    return [
        row["op"],
        row["size"],
        _num(row["bytes"] / 1e6, ".1f") if row.get("bytes") else DASH,
        _num(row["tileaot_us"]),
        rate,
        pct,
        _num(row["torch_us"]),
        _num(row["torch_us"] / row["tileaot_us"], ".2f"),
        _num(jit_us),
        ratio,
        identical,
    ]


def kernels_section(result: dict, chart: str | None) -> list[str]:
    rows = result.get("kernels", [])
    ceilings = result.get("ceilings") or {}
    header = [
        "op",
        "size",
        "MB moved",
        "tileaot µs",
        "rate",
        "% of ceiling",
        "torch µs",
        "torch/tileaot",
        "JIT µs",
        "tileaot/JIT",
        "identical",
    ]
    lines = [
        "## Kernel time",
        "",
        "% of ceiling: of the copy for memory-bound ops (MB moved = bytes read + written, as "
        "each bench/ops/<op>.py counts them), of torch's bf16 matmul for gemm. torch: the same "
        "math as torch ops (eager). JIT: TileLang's JIT of the same kernels_py factory and "
        "variant on the same buffers; tileaot/JIT and identical compare the two in that one "
        "process (bench/jit_compare.py).",
        "",
        *_table(header, [_kernel_row(r, ceilings) for r in rows]),
    ]
    if chart:
        lines += ["", f"![% of copy per op and implementation]({chart})"]
    return lines


def host_section(result: dict) -> list[str]:
    host = result.get("host") or {}
    if not host:
        return ["## Host overhead per call", "", "Not measured (see Steps)."]
    rows = [
        [r["impl"], f"`{r['call']}`", _num(r["us"], ".2f"), _num(r["us_synced"], ".2f")]
        for r in host["rows"]
    ]
    lines = [
        "## Host overhead per call",
        "",
        f"{host['calls']:,} back-to-back calls on {host['input']}, median of {host['bursts']} "
        "bursts: µs/call until the last call returned, and until the GPU finished.",
        "",
        *_table(["impl", "call", "µs/call", "µs/call synced"], rows),
    ]
    floor = host.get("launch_floor")
    if floor:
        parts = ", ".join(f"{name.removesuffix('_us')} {us:.2f} µs" for name, us in floor.items())
        lines += [
            "",
            f"Launch floor (bench/native/launch_floor.cu, empty 3-pointer kernel): {parts}.",
        ]
    return lines


def cold_section(result: dict) -> list[str]:
    cold = result.get("cold_start") or {}
    if not cold:
        return ["## Cold start", "", "Not measured (see Steps)."]
    rows, base = cold["rows"], cold["rows"][TORCH_ROW]
    table = [
        [
            name,
            f"{seconds:.3f}",
            DASH if name == TORCH_ROW else f"+{seconds - base:.3f}",
            ", ".join(f"{v:.2f}" for v in cold["samples"][name]),
        ]
        for name, seconds in rows.items()
    ]
    return [
        "## Cold start",
        "",
        f"Fresh interpreter → first correct result on the GPU, median of {cold['repeats']} "
        "(bench/cold_start.py; starts interleaved).",
        "",
        *_table(["start", "s", "beyond torch", "samples (s)"], table),
    ]


def graphs_section(result: dict) -> list[str]:
    g = result.get("graphs")
    if not g:
        return ["## CUDA graphs", "", "Not measured (see Steps)."]
    row = [
        g["block"],
        str(g["launches"]),
        _num(g["eager_us"]),
        _num(g["eager_host_us"]),
        _num(g["replay_us"]),
        _num(g["eager_us"] / g["replay_us"], ".2f"),
        "yes" if g["replay_equals_eager"] else "**no**",
    ]
    header = [
        "block",
        "launches",
        "eager µs",
        "eager host µs",
        "replay µs",
        "eager/replay",
        "replay == eager",
    ]
    return [
        "## CUDA graphs",
        "",
        f"Per block, {g['iters']} blocks back to back between CUDA events (bench/graphs.py).",
        "",
        *_table(header, [row]),
    ]


def render(result: dict, chart: str | None = None) -> str:
    sections = [
        header(result),
        targets_section(result),
        ceilings_section(result),
        kernels_section(result, chart),
        host_section(result),
        cold_section(result),
        graphs_section(result),
        steps_section(result),
    ]
    return "\n\n".join("\n".join(s).rstrip() for s in sections) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("result", help="a suite result JSON")
    parser.add_argument("-o", "--out", help="Markdown file (default: next to the JSON)")
    parser.add_argument("--chart", help="PNG to link (relative to the Markdown file)")
    args = parser.parse_args()
    path = Path(args.result)
    out = Path(args.out) if args.out else path.with_suffix(".md")
    out.write_text(render(json.loads(path.read_text()), args.chart))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
