"""build_tools on the CPU: the matrix, tracing determinism, and what the gen folder holds."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from build_tools.matrix import enumerate_variants, parse_archs, parse_ops
from kernels_py import all_specs
from kernels_py.spec import DEFAULT_ARCHS

ROOT = Path(__file__).resolve().parents[1]


def test_specs_enumerate_with_unique_names():
    points = enumerate_variants(all_specs(), DEFAULT_ARCHS)
    names = [p.name for p in points]
    assert len(names) == len(set(names))
    assert {p.spec.op for p in points} >= {"rms_norm", "per_token_cast_fp8", "gemm"}
    for spec in all_specs():
        assert {} in [dict(s) for s in spec.specs], f"{spec.op} has no generic variant"
        assert callable(spec.reference), f"{spec.op} has no torch reference"


def test_every_default_arch_has_every_generic_variant_or_a_documented_gap():
    points = enumerate_variants(all_specs(), DEFAULT_ARCHS)
    for p in points:
        if p.generic and p.spec.op != "gemm":
            assert p.archs == DEFAULT_ARCHS, f"{p.name} misses archs"


def test_filters():
    assert parse_archs("90a;sm_80,70") == ("sm_70", "sm_80", "sm_90a")
    with pytest.raises(ValueError, match="unknown arch"):
        parse_archs("91")
    points = enumerate_variants(all_specs(), ("sm_90a",), parse_ops("rms_norm_bf16*"))
    assert points and all(p.name.startswith("rms_norm_bf16") for p in points)


def _generate(out: Path, jobs: int) -> None:
    env = dict(
        os.environ,
        PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
        TILEAOT_CACHE_DIR=f"{out}-cache",  # each run traces for itself
    )
    cmd = [
        sys.executable,
        "-m",
        "build_tools",
        "generate",
        "--out",
        str(out),
        "--specs",
        "toy_specs",
        "--archs",
        "80,86,90a",
        "--jobs",
        str(jobs),
    ]
    subprocess.run(cmd, check=True, cwd=ROOT, env=env)


@pytest.fixture(scope="module")
def gen_pair(tmp_path_factory):
    pytest.importorskip("tilelang")
    a, b = tmp_path_factory.mktemp("gen_a"), tmp_path_factory.mktemp("gen_b")
    _generate(a, jobs=2)
    _generate(b, jobs=1)
    return a, b


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".tlcache" not in p.parts and "stats" not in p.parts  # timings
    }


def test_generation_is_deterministic(gen_pair):
    a, b = gen_pair
    assert _files(a) == _files(b)


def test_identical_sources_compile_once(gen_pair):
    gen, _ = gen_pair
    manifest = json.loads((gen / "manifest.json").read_text())
    cubins = manifest["cubins"]
    # toy_scale lowers identically for sm_80 and sm_86: one sm_80 cubin serves both.
    scale = [c for c in cubins if "toy_scale_bf16_any" in c["source"]]
    assert sorted(c["arch"] for c in scale) == ["sm_80", "sm_90a"]
    rows = {(v["name"], v["arch"]): v for v in manifest["variants"]}
    assert rows[("toy_scale_bf16_any", "sm_86")]["blob_arch"] == "sm_80"
    assert len({c["source"] for c in cubins}) == len(list((gen / "src").glob("*.cu")))


def test_manifest_and_dispatch_table_agree(gen_pair):
    gen, _ = gen_pair
    manifest = json.loads((gen / "manifest.json").read_text())
    table = (gen / "registry.cpp").read_text()
    body = table[table.index("const Variant kVariants[] = {") :]
    rows = re.findall(
        r'^\s+\{"([^"]+)", "([^"]+)", "([^"]+)", "([^"]+)", "([^"]+)", \d+, \d+, '
        r"\w+, (\d+),",
        body,
        re.M,
    )
    assert [(r[0], r[1], r[2], r[3], r[4], int(r[5])) for r in rows] == [
        (v["name"], v["op"], v["key"], v["spec"], v["arch"], v["blob"])
        for v in manifest["variants"]
    ]
    cmake = (gen / "cubins.cmake").read_text()
    for i, c in enumerate(manifest["cubins"]):
        assert f'"{c["source"]}|{c["arch"]}|{c["cubin"]}|tileaot_blob_{i}"' in cmake
    # Specialised rows come before the generic row of the same op and key.
    names = [v["name"] for v in manifest["variants"] if v["op"] == "toy_scale"]
    assert names.index("toy_scale_bf16_n256") < names.index("toy_scale_bf16_any")


def test_launch_facts_of_a_tma_kernel(gen_pair):
    gen, _ = gen_pair
    manifest = json.loads((gen / "manifest.json").read_text())
    (gemm,) = [v for v in manifest["variants"] if v["name"] == "toy_gemm_bf16_any"]
    (kernel,) = gemm["kernels"]
    assert [a["kind"] for a in kernel["args"]][:2] == ["tma", "tma"]
    assert kernel["smem"] > 48 * 1024  # needs the dynamic shared memory attribute
    assert gemm["constraints"] == {"K": 8}
    assert "if (d_K % 8 != 0) return false;" in (gen / "registry.cpp").read_text()
