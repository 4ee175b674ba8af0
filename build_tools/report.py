"""`python -m build_tools report GEN`: the build report, and the size budget check.

Reads what the build left in GEN (manifest.json, stats/trace.json from generate, one
<cubin>.json per cubin from compile) and writes GEN/report.json + GEN/report.md: per
(variant, arch) its trace time, compile time, cubin size and whether each came from the
cache; totals; the ten slowest; size per op and per arch. CMake runs it after the last
compile and before linking, so an exceeded TILEAOT_SIZE_BUDGET_MB stops the build there.

Sizes: `bytes` is the cubins' own size (what the driver loads); `zipped` is their deflate size,
about what they take in libtileaot.so (which embeds them zlib-compressed: build_tools/blob.py)
and add to the wheel. The budget applies to `zipped`.
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from collections import defaultdict
from pathlib import Path

from build_tools.cache import write_atomic
from build_tools.cubin import debug_sections
from build_tools.progress import format_seconds

MIB = 1024 * 1024


def _read_json(path: Path, default):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def _cubin_facts(gen: Path, entry: dict) -> dict:
    path = gen / entry["cubin"]
    stats = _read_json(path.with_name(path.name + ".json"), {})
    data = path.read_bytes() if path.is_file() else b""
    if stats.get("bytes") != len(data) or "zipped" not in stats:  # stale, or no stats
        stats["zipped"] = len(zlib.compress(data, 6)) if data else 0
    return {
        "cubin": entry["cubin"],
        "arch": entry["arch"],
        "bytes": len(data),
        "zipped": stats["zipped"],
        # PTX (compute_XX) is text: debug info would be .loc lines, which the build never asks for
        "debug_info": data[:4] == b"\x7fELF" and bool(debug_sections(data)),
        "compile_seconds": stats.get("seconds"),
        "compile_cached": stats.get("cached"),
        "compiled": path.is_file(),
    }


def build_report(gen: Path) -> dict:
    gen = Path(gen)
    manifest = json.loads((gen / "manifest.json").read_text())
    traces = _read_json(gen / "stats" / "trace.json", {})
    cubins = [_cubin_facts(gen, c) | {"op": None} for c in manifest["cubins"]]
    rows, owned = [], set()
    for v in manifest["variants"]:
        cubin = cubins[v["blob"]]
        cubin["op"] = v["op"]
        trace = traces.get(f"{v['name']}@{v['arch']}", {})
        # The first row whose arch the cubin was compiled for carries its compile time (a
        # batch's cubin serves several variants of that arch: only one of them pays).
        owner = cubin["arch"] == v["arch"] and v["blob"] not in owned
        if owner:
            owned.add(v["blob"])
        rows.append(
            {
                "name": v["name"],
                "op": v["op"],
                "arch": v["arch"],
                "trace_seconds": trace.get("seconds"),
                "trace_cached": trace.get("cached"),
                "trace_shared": trace.get("shared"),  # the lowering class's traced arch
                "cubin": cubin["cubin"],
                "compile_seconds": cubin["compile_seconds"] if owner else 0.0,
                "compile_cached": cubin["compile_cached"],
                "cubin_bytes": cubin["bytes"],
                "cubin_shared": not owner,
            }
        )
    return {
        "archs": manifest["archs"],
        "ops": manifest["ops"],
        "totals": _totals(rows, cubins),
        "size_by_op": _sizes(cubins, "op"),
        "size_by_arch": _sizes(cubins, "arch"),
        "slowest": sorted(rows, key=_row_seconds, reverse=True)[:10],
        "variants": rows,
        "cubins": cubins,
    }


def _row_seconds(row: dict) -> float:
    return (row["trace_seconds"] or 0.0) + (row["compile_seconds"] or 0.0)


def _totals(rows: list[dict], cubins: list[dict]) -> dict:
    return {
        "variants": len({r["name"] for r in rows}),
        "rows": len(rows),
        "cubins": len(cubins),
        "traced": sum(r["trace_cached"] is False for r in rows),
        "traces_from_cache": sum(r["trace_cached"] is True for r in rows),
        "traces_shared": sum(bool(r.get("trace_shared")) for r in rows),
        "trace_seconds": sum(r["trace_seconds"] or 0.0 for r in rows),
        "compiled": sum(c["compile_cached"] is False for c in cubins),
        "cubins_from_cache": sum(c["compile_cached"] is True for c in cubins),
        "cubins_missing": sum(not c["compiled"] for c in cubins),
        "compile_seconds": sum(c["compile_seconds"] or 0.0 for c in cubins),
        "bytes": sum(c["bytes"] for c in cubins),
        "zipped": sum(c["zipped"] for c in cubins),
        "with_debug_info": sum(c["debug_info"] for c in cubins),
    }


def _sizes(cubins: list[dict], field: str) -> dict:
    out: dict = defaultdict(lambda: {"cubins": 0, "bytes": 0, "zipped": 0})
    for c in cubins:
        group = out[c[field]]
        group["cubins"] += 1
        group["bytes"] += c["bytes"]
        group["zipped"] += c["zipped"]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["zipped"]))


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------


def _mib(n: int) -> str:
    return f"{n / MIB:.2f}"


def _secs(value, cached) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" + (" (cache)" if cached else "")


def _table(header: list[str], lines: list[list]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(x) for x in line) + " |" for line in lines]
    return out + [""]


def to_markdown(report: dict) -> str:
    t = report["totals"]
    md = [
        "# tileaot build report",
        "",
        f"{t['variants']} variants, {t['rows']} (variant, arch) rows, {t['cubins']} cubins; "
        f"archs {', '.join(report['archs'])}; ops {', '.join(report['ops'])}.",
        "",
        f"- tracing: {t['traced']} traced, {t['traces_from_cache']} from cache, "
        f"{t.get('traces_shared', 0)} shared by a lowering class, "
        f"{format_seconds(t['trace_seconds'])} of trace time",
        f"- compiling (each cubin as last built): {t['compiled']} compiled, "
        f"{t['cubins_from_cache']} from cache, {t['cubins_missing']} not built, "
        f"{format_seconds(t['compile_seconds'])} of compile time",
        f"- cubins: {_mib(t['bytes'])} MiB, {_mib(t['zipped'])} MiB zipped (about what they "
        f"take in libtileaot.so, which embeds them compressed, and add to the wheel); "
        f"{t['with_debug_info']} with debug info",
        "",
        "## Size per op",
        "",
    ]
    for field in ("op", "arch"):
        if field == "arch":
            md += ["## Size per arch (compile arch: an sm_80 cubin also serves sm_86/sm_89)", ""]
        groups = report[f"size_by_{field}"]
        md += _table(
            [field, "cubins", "MiB", "MiB zipped"],
            [[k, g["cubins"], _mib(g["bytes"]), _mib(g["zipped"])] for k, g in groups.items()],
        )
    row_cells = [
        lambda r: r["name"],
        lambda r: r["arch"],
        lambda r: (
            f"shared ({r['trace_shared']})"
            if r.get("trace_shared")
            else _secs(r["trace_seconds"], r["trace_cached"])
        ),
        lambda r: (
            "shared" if r["cubin_shared"] else _secs(r["compile_seconds"], r["compile_cached"])
        ),
        lambda r: f"{r['cubin_bytes'] / 1024:.0f}",
    ]
    header = ["variant", "arch", "trace s", "compile s", "cubin KiB"]
    md += ["## Slowest ten (trace + compile)", ""]
    md += _table(header, [[f(r) for f in row_cells] for r in report["slowest"]])
    md += ["## Every variant", ""]
    md += _table(header, [[f(r) for f in row_cells] for r in report["variants"]])
    return "\n".join(md)


# ---------------------------------------------------------------------------------------------
# Size budget
# ---------------------------------------------------------------------------------------------


def budget_error(report: dict, budget_mib: float) -> str | None:
    """The message for an exceeded budget (None if within it, or budget_mib <= 0)."""
    zipped = report["totals"]["zipped"]
    if budget_mib <= 0 or zipped <= budget_mib * MIB:
        return None
    biggest = list(report["size_by_op"].items())[:5]
    ops = ", ".join(f"{op} {_mib(g['zipped'])} MiB" for op, g in biggest)
    archs = ", ".join(f"{a} {_mib(g['zipped'])}" for a, g in report["size_by_arch"].items())
    return (
        f"tileaot: the cubins take {_mib(zipped)} MiB zipped (about what they add to the "
        f"wheel), over the size budget of {budget_mib:g} MiB (TILEAOT_SIZE_BUDGET_MB).\n"
        f"  biggest ops: {ops}\n  per arch (MiB): {archs}\n"
        "Build fewer variants with TILEAOT_OPS (globs over variant names, e.g. "
        "-Ccmake.define.TILEAOT_OPS='rms_norm*,gemm_bf16*') or fewer archs with TILEAOT_ARCHS "
        "(e.g. -Ccmake.define.TILEAOT_ARCHS='80;90a'), or raise the budget with "
        "-Ccmake.define.TILEAOT_SIZE_BUDGET_MB=N (0: no limit)."
    )


def write_report(gen: Path, out: Path | None = None) -> dict:
    """Always rewritten (not write-if-different): CMake compares its time with the cubins'."""
    out = Path(out) if out else Path(gen)
    report = build_report(gen)
    write_atomic(out / "report.json", (json.dumps(report, indent=1) + "\n").encode())
    write_atomic(out / "report.md", (to_markdown(report) + "\n").encode())
    return report


def summary_line(report: dict, markdown: Path) -> str:
    """The one-line summary `report` prints (and scripts/build_wheel.sh repeats after pip)."""
    t = report["totals"]
    return (
        f"tileaot report: {t['rows']} rows, {t['cubins']} cubins, {_mib(t['bytes'])} MiB "
        f"({_mib(t['zipped'])} MiB zipped); traces {t['traced']} new + "
        f"{t['traces_from_cache']} cached + {t.get('traces_shared', 0)} shared, "
        f"cubins {t['compiled']} compiled + "
        f"{t['cubins_from_cache']} cached → {markdown}"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m build_tools report")
    parser.add_argument("gen", type=Path, help="gen folder (after compiling)")
    parser.add_argument("--out", type=Path, help="where report.{md,json} go (default: GEN)")
    parser.add_argument(
        "--budget-mb",
        type=float,
        default=0.0,
        help="fail if the zipped cubins exceed this many MiB (0: no limit)",
    )
    args = parser.parse_args(argv)
    report = write_report(args.gen, args.out)
    print(summary_line(report, (args.out or args.gen) / "report.md"))
    error = budget_error(report, args.budget_mb)
    if error:
        print(error, file=sys.stderr)
        # CMake's output is report.json: without it the next build runs this check again.
        ((args.out or args.gen) / "report.json").unlink()
        return 1
    return 0
