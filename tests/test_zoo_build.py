"""One zoo model's suggested build, end to end, as a user runs it (CPU; traces with TileLang).

`python -m tileaot check MODEL --arch GPU --save-config T.toml` writes a bring-your-shapes TOML;
`python -m build_tools generate --config T.toml` traces it and `compile-all` makes its cubins;
`check --manifest` on that build must then say the model is fully covered on that GPU. The
other models' TOMLs are checked without tracing (tests/test_model_zoo.py); this one is traced
and compiled. Mixtral-8x7B on an A100 (sm_80): rms_norm, gemm, swiglu, topk_gate (E = 8),
moe_expand and moe_reduce at its sizes. In CI the traces come from the default build's cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_check import write_manifest

pytest.importorskip("tilelang", reason="tracing needs tilelang (scripts/test.sh installs it)")

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "models" / "mixtral-8x7b.json"
GPU = "A100"


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def test_the_suggested_config_of_a_zoo_model_builds_and_covers_it(tmp_path):
    default = write_manifest(tmp_path / "default.json")
    toml = tmp_path / "mixtral.toml"
    check = ("tileaot", "check", str(MODEL), "--arch", GPU, "--manifest")
    _run(*check, str(default), "--save-config", str(toml))
    assert 'archs = ["80"]' in toml.read_text()

    gen = tmp_path / "gen"
    _run("build_tools", "generate", "--out", str(gen), "--config", str(toml), "--ptx", "off")
    _run("build_tools", "compile-all", str(gen))
    manifest = json.loads((gen / "manifest.json").read_text())
    built = {v["name"] for v in manifest["variants"]}
    assert built and {v["arch"] for v in manifest["variants"]} == {"sm_80"}
    # Each variant's blob (its own cubin, or its op's batch) was compiled for sm_80.
    for v in manifest["variants"]:
        cubin = gen / manifest["cubins"][v["blob"]]["cubin"]
        assert cubin.name.endswith(".sm_80.cubin") and cubin.stat().st_size > 0, (v["name"], cubin)

    report = json.loads(_run(*check, str(gen / "manifest.json"), "--json").stdout)
    assert report["covered"], [c for c in report["calls"] if c["status"] != "specialised"]
    # Every op the TOML specialises is served by a specialised variant (moe_reduce has none).
    specialised_ops = {line[len("[ops.") : -1] for line in toml.read_text().splitlines()
                       if line.startswith("[ops.")}  # fmt: skip
    assert specialised_ops >= {"rms_norm", "gemm", "topk_gate", "moe_expand", "swiglu"}
    for c in report["calls"]:
        assert c["op"] not in specialised_ops or c["status"] == "specialised", c
