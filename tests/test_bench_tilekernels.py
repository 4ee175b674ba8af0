"""bench/tilekernels.py (its cases: bench/tk_cases.py) without a GPU: it imports, skips in one
line, covers README's catalog, pairs each case with our bench case of the same label and size,
and writes its tables."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import tilekernels  # noqa: E402  (imported without a GPU: that is under test too)
import tk_cases  # noqa: E402
import torch  # noqa: E402
from timing import Timing  # noqa: E402


def _bench_cases(path: Path) -> set[tuple[str, str]]:
    """(label, size) of every literal case tuple in a bench/ops file, read without importing it
    (the file imports tileaot's native module)."""
    pairs = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Tuple) and len(node.elts) == 3:
            label, size = node.elts[:2]
            if all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in (label, size)):
                pairs.add((label.value, size.value))
    return pairs


def test_skips_in_one_line_without_a_gpu(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tilekernels.main([]) == 0
    out = capsys.readouterr().out
    assert out == "[tkbench] skipped: no CUDA GPU\n"


def test_catalog_is_derived_from_readme():
    readme = """
### TileKernels counterparts
| op | TileKernels | what |
|---|---|---|
| `a_op` | `tk_fn(x)` | `not_an_op` |
| `cast_back` (fp8: `g32`, `token`) | `cast_back` | – |
| `b_op` (+ `b_op_backward`, autograd) | `x` | y |

### Switching
| `c_op` | outside the section |
"""
    assert tilekernels.catalog_ops(readme) == {"a_op", "cast_back", "b_op", "b_op_backward"}
    ops = tilekernels.catalog_ops()
    assert {"per_token_cast_fp8", "moe_expand", "mhc_post_backward", "engram_gate"} <= ops


def test_every_op_with_a_tilekernels_counterpart_has_a_case():
    missing = tilekernels.catalog_ops() - {case.op for case in tk_cases.CASES}
    assert not missing, f"README lists TileKernels counterparts without a case: {sorted(missing)}"


def test_cases_stand_beside_our_bench_cases():
    for case in tk_cases.CASES:
        if case.bench_file.exists():
            assert case.label is not None, (
                f"{case.bench_file.name} exists now: give {case.op}'s TileKernels case the label"
                " of its bench case"
            )
            ours = _bench_cases(case.bench_file)
            assert (case.label, case.size) in ours, f"{case} has no bench case {case.bench_file}"
        else:
            assert case.label is None, f"{case.op}: labelled, but {case.bench_file} is absent"
    keys = [(c.op, c.label, c.size) for c in tk_cases.CASES]
    assert len(keys) == len(set(keys)), "two cases of one op, label and size"


def _fake_result(suite: dict) -> dict:
    rows = [
        {"op": "cast_back", "label": "cast_back fp8 g128 -> bf16", "size": "32768x7168",
         "note": "", "status": "ok", "tk_us": 180.0, "reps": 300, "first_call_s": 2.9},
        {"op": "moe_reduce", "label": "moe_reduce bf16->fp32 weighted", "size": "4096x7168 k8",
         "note": "", "status": "unavailable", "reason": "no fp32 | out"},
        {"op": "fused_weight", "label": None, "size": "4x7168", "note": "", "status": "failed",
         "reason": "RuntimeError: boom", "first_call_s": None},
    ]  # fmt: skip
    tilekernels.attach_tileaot(rows, suite)
    return {
        "schema": 1,
        "date": "2026-12-02",
        "command": "python bench/tilekernels.py --suite s.json",
        "suite": "s.json",
        "import_s": 15.2,
        "machine": {"gpu": "NVIDIA H200", "torch": "2.11", "tilelang": "0.1.15"},
        "rows": rows,
    }


def test_tables_from_a_fake_result(tmp_path, monkeypatch):
    # a case of an op whose bench/ops file is absent (every real case has one by now)
    absent = tk_cases.Case("fused_weight", None, "4x7168", lambda tk: None)
    monkeypatch.setattr(tilekernels, "CASES", [*tilekernels.CASES, absent])
    suite = {"kernels": [{"op": "cast_back fp8 g128 -> bf16", "size": "32768x7168",
                          "tileaot_us": 150.0}]}  # fmt: skip
    result = _fake_result(suite)
    assert result["rows"][0]["ratio"] == 180.0 / 150.0
    assert result["rows"][2]["tileaot_note"].startswith("no bench/ops/fused_weight.py")
    path = tilekernels.write(result, tmp_path)
    assert path.name == "h200-2026-12-02-tilekernels.json"
    assert json.loads(path.read_text())["rows"][0]["tileaot_us"] == 150.0
    md = path.with_suffix(".md").read_text().splitlines()
    table = [line for line in md if line.startswith("| ")][1:]
    assert table[0] == (
        "| cast_back | cast_back fp8 g128 -> bf16 | 32768x7168 | 150.0 | 180.0 | 1.20× | 2.90 |  |"
    )
    assert table[1].startswith("| moe_reduce | moe_reduce bf16->fp32 weighted | 4096x7168 k8 | — |")
    assert "| unavailable |" in table[1] and "no fp32 / out" in table[1]
    assert "| failed |" in table[2] and "RuntimeError: boom" in table[2]
    assert all(line.count("|") == 9 for line in table)


def test_main_writes_every_case_with_its_status(tmp_path, monkeypatch, capsys):
    """The whole run on a fake TileKernels and clock: ok, unavailable and failing cases all
    reach the table, each with the tileaot figure of its suite case."""

    class FakeTk:
        import_s = 1.5

    def boom(tk):
        raise RuntimeError("kernel failed")

    Case = tk_cases.Case
    cases = [
        Case("normalize_weight", "normalize_weight k8", "32768x8", lambda tk: lambda: None),
        Case("group_count", "group_count e256 k8", "4096x8", tk_cases._unavailable("no way")),
        Case("fused_weight", None, "4x7168", boom),
    ]
    monkeypatch.setattr(tilekernels, "CASES", cases)
    monkeypatch.setattr(tilekernels, "unavailable_here", lambda: None)
    monkeypatch.setattr(tilekernels, "TileKernels", FakeTk)
    monkeypatch.setattr(tilekernels, "measure", lambda fn: Timing(12.0, 30, 11, 13))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "NVIDIA H200")
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "keep"))  # main sets its own
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"kernels": [
        {"op": "normalize_weight k8", "size": "32768x8", "tileaot_us": 8.0}]}))  # fmt: skip
    assert tilekernels.main(["--suite", str(suite), "--out", str(tmp_path)]) == 0
    result = json.loads(next(tmp_path.glob("h200-*-tilekernels.json")).read_text())
    ok, unavailable, failed = result["rows"]
    assert (ok["status"], ok["tk_us"], ok["tileaot_us"], ok["ratio"]) == ("ok", 12.0, 8.0, 1.5)
    assert (unavailable["status"], unavailable["reason"]) == ("unavailable", "no way")
    assert failed["status"] == "failed" and failed["reason"] == "RuntimeError: kernel failed"
    assert "[tkbench] wrote" in capsys.readouterr().out


def test_swiglu_fix_puts_the_reducers_under_count_clamp():
    """TILEKERNELS-H200.md's second fix, on the installed tile-kernels (skips without it)."""
    import inspect

    from _tile_kernels import tk

    tk()  # skips where tile-kernels 1.0.0 and tilelang are not importable
    fixed = tilekernels.TileKernels()
    module = sys.modules[tilekernels.SWIGLU_MODULE]
    source = inspect.getsource(module)
    assert "if count_clamp:\n                count_silu = T.alloc_reducer" in source
    assert "                T.fill(count_lower, 0)\n" in source
    assert fixed.quant.swiglu_forward_and_per_token_cast is module.swiglu_forward_and_per_token_cast
