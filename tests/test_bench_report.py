"""The benchmark suite's report side on a synthetic result: targets, Markdown, merge, chart.

No GPU and no torch: bench/suite.py's numbers come from the GPU machine, but what it makes of
them (targets met or missed, tables, the chart's bars) is plain data handling, checked here.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import chart  # noqa: E402
import report  # noqa: E402
import suite  # noqa: E402
import targets  # noqa: E402
from cold_start import JIT_COLD_ROW, JIT_WARM_ROW, TILEAOT_ROW, TORCH_ROW  # noqa: E402

RESULT = {
    "schema": 1,
    "date": "2026-12-01",
    "suite": {"command": "python bench/suite.py", "quick": False, "elapsed_s": 401.0},
    "machine": {"gpu": "NVIDIA H200", "torch": "2.11", "cuda": "13.0", "tilelang": "0.1.15"},
    "steps": {"ceilings": {"status": "ok", "seconds": 12.0}, "jit": {"status": "ok"}},
    "ceilings": {
        "copy_gbs": 4000.0,
        "matmul_size": "8192x8192x8192",
        "matmul_us": 1600.0,
        "matmul_tflops": 687.2,
    },
    "kernels": [
        {
            "op": "rms_norm bf16",
            "size": "32768x7168",
            "bytes": 2_000_000_000,
            "flops": None,
            "tileaot_us": 1000.0,  # 2 GB in 1 ms: 2000 GB/s, 50 % of copy
            "torch_us": 4000.0,
            "tilelang_jit_us": 990.0,
            "jit_tileaot_us": 1001.0,
            "bit_identical": True,
        },
        {
            "op": "gemm bf16",
            "size": "8192x8192x8192",
            "bytes": None,
            "flops": 2 * 8192**3,
            "tileaot_us": 1700.0,
            "torch_us": 1600.0,
            "tilelang_jit_us": 1690.0,
            "jit_tileaot_us": 1700.0,
            "bit_identical": True,
        },
        {"op": "swiglu bf16", "size": "128x2*2048", "error": "VariantMissError: no variant"},
    ],
    "host": {
        "input": "x[4, 4096] bf16",
        "calls": 10000,
        "bursts": 5,
        "rows": [
            {"impl": "tileaot", "call": "out=", "us": 1.8, "us_synced": 2.9},
            {"impl": "tileaot", "call": "allocating", "us": 2.6, "us_synced": 3.0},
            {"impl": "torch eager", "call": "F.rms_norm", "us": 9.0, "us_synced": 9.1},
            {"impl": "TileLang JIT", "call": "kernel", "us": 7.5, "us_synced": 7.6},
        ],
        "launch_floor": {"cuLaunchKernel_us": 1.1, "cuLaunchKernelEx_us": 1.2},
    },
    "cold_start": {
        "repeats": 3,
        "rows": {TORCH_ROW: 5.0, TILEAOT_ROW: 5.05, JIT_COLD_ROW: 14.0, JIT_WARM_ROW: 8.0},
        "samples": {
            TORCH_ROW: [5.0, 5.1, 4.9],
            TILEAOT_ROW: [5.05, 5.0, 5.1],
            JIT_COLD_ROW: [14.0, 13.0, 15.0],
            JIT_WARM_ROW: [8.0, 8.1, 7.9],
        },
    },
    "graphs": {
        "block": "16 tokens",
        "launches": 5,
        "iters": 500,
        "replay_equals_eager": True,
        "eager_us": 80.0,
        "eager_host_us": 75.0,
        "replay_us": 30.0,
        "replay_host_us": 2.0,
    },
}


def judged(result: dict) -> dict[str, bool | None]:
    return {t["target"]: t["met"] for t in targets.evaluate(result)}


def met_where(result: dict, words: str) -> bool | None:
    (met,) = [m for name, m in judged(result).items() if words in name]
    return met


def test_targets_of_the_synthetic_run():
    met = judged(RESULT)
    assert len(met) == 10 + len(targets.GENERIC_PAIRS)
    assert met_where(RESULT, "(generic N)") is None  # not in this run
    assert met_where(RESULT, "≤ 2 µs") is True  # 1.8 µs
    assert met_where(RESULT, "below torch eager") is True
    assert met_where(RESULT, "below TileLang JIT") is True
    assert met_where(RESULT, "≤ 0.1 s beyond") is True  # +0.05 s
    assert met_where(RESULT, "30× faster") is True  # +3.0 s against +0.05 s: 60×
    assert met_where(RESULT, "kernel time = TileLang JIT") is True  # swiglu failed before JIT
    assert met_where(RESULT, "bit-identical") is True
    assert met_where(RESULT, "gemm bf16") is True  # 1600 / 1700 = 0.94
    assert met_where(RESULT, "CUDA-graph") is True
    assert met_where(RESULT, "under 8 min") is True


def test_each_target_can_miss():
    r = copy.deepcopy(RESULT)
    r["host"]["rows"][0]["us"] = 8.0  # slower than 2 µs and than TileLang's 7.5
    r["cold_start"]["rows"][TILEAOT_ROW] = 5.2  # +0.2 s
    r["kernels"][0]["jit_tileaot_us"] = 1100.0  # 11 % slower than the JIT
    r["kernels"][0]["bit_identical"] = False
    r["kernels"][1]["tileaot_us"] = 2000.0  # 0.8x torch.matmul
    r["graphs"]["replay_equals_eager"] = False
    r["suite"]["elapsed_s"] = 500.0
    met = judged(r)
    assert [name for name, m in met.items() if m] == ["host overhead below torch eager"]
    assert report.render(r).count("| **missed** |") == 9


def test_generic_vs_specialised_bandwidth():
    r = copy.deepcopy(RESULT)
    (generic, gsize), (spec, ssize) = targets.GENERIC_PAIRS[1]  # swiglu 1400 vs 2048
    rows = [
        {"op": spec, "size": ssize, "bytes": 6 * 32768 * 2048, "tileaot_us": 100.0},
        {"op": generic, "size": gsize, "bytes": 6 * 32768 * 1400, "tileaot_us": 75.0},
    ]
    r["kernels"] += rows
    words = f"{generic} {gsize}"
    assert met_where(r, words) is True  # 1400 / 75 against 2048 / 100: 91 %
    rows[1]["tileaot_us"] = 80.0  # 85 %
    assert met_where(r, words) is False
    (t,) = [t for t in targets.evaluate(r) if words in t["target"]]
    assert t["measured"].endswith(": 85%")
    rows[0]["error"], rows[0]["tileaot_us"] = "VariantMissError", None
    assert met_where(r, words) is None


def test_cold_start_ratio_counts_time_beyond_torch():
    r = copy.deepcopy(RESULT)
    rows = r["cold_start"]["rows"]
    rows[JIT_WARM_ROW] = rows[TORCH_ROW] + 30 * 0.05 + 0.01  # just over 30x tileaot's +0.05 s
    assert met_where(r, "30× faster") is True
    rows[TILEAOT_ROW] = rows[TORCH_ROW] - 0.02  # tileaot within the spread of torch alone
    assert met_where(r, "30× faster") is True
    assert "∞" in [t for t in targets.evaluate(r) if "30×" in t["target"]][0]["measured"]


def test_jit_noise_band():
    r = copy.deepcopy(RESULT)
    assert met_where(r, "kernel time = TileLang JIT") is True  # 1001 vs 990, 1700 vs 1690
    r["kernels"][2]["jit_error"] = "TVMError: ..."  # a case whose JIT failed is not equal
    assert met_where(r, "kernel time = TileLang JIT") is False
    del r["kernels"][2]["jit_error"]
    r["kernels"][0]["jit_tileaot_us"] = 990 * 1.06
    assert met_where(r, "kernel time = TileLang JIT") is False
    r["kernels"][0] |= {"tilelang_jit_us": 3.0, "jit_tileaot_us": 3.4}  # +13 %, but 0.4 µs
    assert met_where(r, "kernel time = TileLang JIT") is True


def test_unmeasured_targets_are_not_met_or_missed():
    empty = {"date": "2026-12-01", "suite": {"command": "x", "quick": True, "elapsed_s": 90.0}}
    assert set(judged(empty).values()) == {None}
    text = report.render(empty)
    assert text.count("not measured") >= 11
    assert "Not measured (see Steps)." in text


def test_markdown_tables():
    text = report.render(RESULT, "h200-2026-12-01.png")
    lines = text.splitlines()
    assert lines[0] == "# NVIDIA H200, 2026-12-01: benchmark suite (issue 4)"
    (rms,) = [line for line in lines if line.startswith("| rms_norm bf16 |")]
    cells = [c.strip() for c in rms.strip("|").split("|")]
    assert cells == [
        "rms_norm bf16",
        "32768x7168",
        "2000.0",
        "1000.0",
        "2000 GB/s",
        "50",
        "4000.0",
        "4.00",
        "990.0",
        "1.011",
        "yes",
    ]
    (gemm,) = [line for line in lines if line.startswith("| gemm bf16 |")]
    assert "| 646.8 TFLOP/s | 94 |" in gemm  # 2·8192³ / 1700 µs, of 687.2
    assert any(line.startswith("| swiglu bf16 |") and "failed" in line for line in lines)
    assert text.count("| met |") == 10 and "missed" not in text
    assert "![% of copy per op and implementation](h200-2026-12-01.png)" in text
    assert f"| {TILEAOT_ROW} | 5.050 | +0.050 | 5.05, 5.00, 5.10 |" in text
    assert "| 16 tokens | 5 | 80.0 | 75.0 | 30.0 | 2.67 | yes |" in text
    assert "cuLaunchKernel 1.10 µs, cuLaunchKernelEx 1.20 µs" in text
    tables = "\n".join(line if line.startswith("|") else "" for line in lines).split("\n\n")
    for table in filter(None, (t.strip() for t in tables)):  # each row as wide as its header
        widths = {row.count(" | ") + 1 for row in table.splitlines() if not row.startswith("|-")}
        assert len(widths) == 1, table


def test_merge_pairs_jit_rows_by_case_occurrence():
    run = {
        "rows": [
            {"op": "a", "size": "s", "tileaot_us": 1.0},
            {"op": "a", "size": "s", "tileaot_us": 2.0},  # the same label and size again
            {"op": "b", "size": "s", "tileaot_us": 3.0},
        ],
        "failed": [{"op": "c", "size": "s", "error": "boom"}],
    }
    jit = {
        "kernels": [
            {
                "op": "a",
                "size": "s",
                "tileaot_us": 1.1,
                "tilelang_jit_us": 1.2,
                "ratio": 0.9,
                "bit_identical": True,
                "variants": ["a1"],
            },  # fmt: skip
            {
                "op": "a",
                "size": "s",
                "tileaot_us": 2.1,
                "tilelang_jit_us": 2.2,
                "ratio": 0.9,
                "bit_identical": False,
                "variants": ["a2"],
            },  # fmt: skip
            {"op": "b", "size": "s", "error": "no tilelang variant"},
        ]
    }
    rows = suite.merge_kernels(run, jit)
    assert [r.get("jit_variants") for r in rows] == [["a1"], ["a2"], None, None]
    assert [r.get("jit_tileaot_us") for r in rows[:2]] == [1.1, 2.1]
    assert rows[2]["jit_error"] == "no tilelang variant"
    assert rows[3] == {"op": "c", "size": "s", "error": "boom"}
    assert suite.merge_kernels(None, None) == []


def test_gpu_slug():
    assert suite.gpu_slug("NVIDIA H200") == "h200"
    assert suite.gpu_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert suite.gpu_slug(None) == "gpu"


def test_chart_series_is_percent_of_copy():
    labels, percent = chart.series(RESULT)
    assert labels == ["rms_norm bf16  32768x7168"]  # gemm (no bytes) and failures left out
    assert percent["tileaot"] == [pytest.approx(50.0)]
    assert percent["torch eager"] == [pytest.approx(12.5)]
    assert percent["TileLang JIT"] == [pytest.approx(2e9 / 990 / 1e3 / 40)]
    no_jit = copy.deepcopy(RESULT)
    for row in no_jit["kernels"]:
        row.pop("tilelang_jit_us", None)
    assert list(chart.series(no_jit)[1]) == ["tileaot", "torch eager"]


def test_chart_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = chart.draw(RESULT, tmp_path / "h200.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_assemble_and_write(tmp_path):
    """The suite's last stage on step outputs shaped like the scripts' JSON files."""
    kernels = {"rows": [dict(RESULT["kernels"][0])], "failed": [RESULT["kernels"][2]]}
    for key in ("tilelang_jit_us", "jit_tileaot_us", "bit_identical"):
        del kernels["rows"][0][key]
    jit_row = {"op": "rms_norm bf16", "size": "32768x7168", "tileaot_us": 1001.0}
    jit_row |= {"tilelang_jit_us": 990.0, "bit_identical": True, "variants": ["rms_norm_n7168"]}
    host = {k: v for k, v in RESULT["host"].items() if k != "launch_floor"}
    out = {
        "ceilings": RESULT["ceilings"] | {"gpu": "NVIDIA H200"},
        "kernels": kernels,
        "jit": {"kernels": [jit_row], "host": {}},
        "host": host,
        "launch_floor": RESULT["host"]["launch_floor"],
        "graphs": RESULT["graphs"],
        "cold_start": RESULT["cold_start"],
    }
    runner = suite.Runner(tmp_path, {}, 100, quick=False)
    runner.skip("jit_prewarm", "a | b")  # a cell with a bar in it
    result = suite.assemble(out, runner, started=0.0, date="2026-12-01", command="x")
    assert result["kernels"][0]["jit_tileaot_us"] == 1001.0
    assert result["host"]["launch_floor"] == RESULT["host"]["launch_floor"]
    assert result["machine"]["gpu"] == "NVIDIA H200"
    path = suite.write(result, tmp_path / "results")
    assert path.name == "h200-2026-12-01.json"
    assert json.loads(path.read_text())["targets"] == targets.evaluate(result)
    text = path.with_suffix(".md").read_text()
    assert "| jit_prewarm | skipped | — | a \\| b |" in text
    assert "(h200-2026-12-01.png)" in text
    has_matplotlib = importlib.util.find_spec("matplotlib") is not None
    assert path.with_suffix(".png").exists() == has_matplotlib
