"""PNG chart of a suite result: bandwidth per op as % of the copy ceiling, a bar per implementation.

    python bench/chart.py RESULT.json [-o RESULT.png]

Memory-bound rows only (those that count bytes; gemm is in TFLOP/s and stays in the table).
Bars: tileaot, torch eager and, where measured, TileLang's JIT of the same kernel. Needs
matplotlib, which the GPU image may lack: the suite then leaves this to be run on the JSON
elsewhere (`pip install matplotlib`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Implementation → the kernel row's time of it; the order of the bars in each group.
IMPLS = {"tileaot": "tileaot_us", "torch eager": "torch_us", "TileLang JIT": "tilelang_jit_us"}
COLORS = {"tileaot": "#1f6fb4", "torch eager": "#b0b0b0", "TileLang JIT": "#e08a1e"}


def series(result: dict) -> tuple[list[str], dict[str, list[float | None]]]:
    """(row labels, % of copy per implementation); implementations never measured dropped."""
    copy = result["ceilings"]["copy_gbs"]
    rows = [r for r in result["kernels"] if r.get("bytes") and "error" not in r]
    labels = [f"{r['op']}  {r['size']}" for r in rows]
    percent = {}
    for impl, field in IMPLS.items():
        values = [100 * r["bytes"] / r[field] / 1e3 / copy if r.get(field) else None for r in rows]
        if any(v is not None for v in values):
            percent[impl] = values
    return labels, percent


def draw(result: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on either machine
    import matplotlib.pyplot as plt

    labels, percent = series(result)
    width = 0.8 / max(len(percent), 1)
    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.13 * len(labels) * max(len(percent), 1)))
    for i, (impl, values) in enumerate(percent.items()):
        ys = [row + i * width for row in range(len(labels))]
        ax.barh(ys, [v or 0 for v in values], height=width, label=impl, color=COLORS[impl])
    ax.set_yticks([row + width * (len(percent) - 1) / 2 for row in range(len(labels))], labels)
    ax.invert_yaxis()  # first case on top, as in the table
    ax.margins(y=0.01)
    top = max((v for values in percent.values() for v in values if v), default=100)
    ax.set_xlim(0, max(105, 1.05 * top))  # room past the 100 % line and any row beyond it
    ax.axvline(100, color="black", linewidth=0.8, linestyle="--")
    ax.set_xlabel(f"% of device-to-device copy ({result['ceilings']['copy_gbs']:.0f} GB/s)")
    gpu = result.get("machine", {}).get("gpu", "GPU")
    ax.set_title(f"{gpu}, {result['date']}: bandwidth per op")
    ax.legend(loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("result", help="a suite result JSON")
    parser.add_argument("-o", "--out", help="PNG file (default: next to the JSON)")
    args = parser.parse_args()
    path = Path(args.result)
    print(
        draw(json.loads(path.read_text()), Path(args.out) if args.out else path.with_suffix(".png"))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
