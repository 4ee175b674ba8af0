"""build_tools on the CPU: the matrix, tracing determinism, what the gen folder holds, and how
cubins are packed and embedded in the library."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from build_tools.blob import embedded_cubins, pack, unpack
from build_tools.emit_cpp import emit_blob_table
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
    assert parse_archs("9.0;B300,sm_120f") == ("sm_90a", "sm_100f", "sm_120f")
    with pytest.raises(ValueError, match="no tileaot target runs on '91'"):
        parse_archs("91")
    with pytest.raises(ValueError, match="unknown arch 'sm_91x' in --archs"):
        parse_archs("sm_91x")
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
    # With sm_80 built, its sources are also embedded as compute_80 PTX (the forward path).
    # Both toy_scale variants of one arch are one compile batch (build_tools/generate.py).
    scale = [c for c in cubins if "toy_scale_bf16_any" in " ".join(c.get("members", [c["source"]]))]
    assert sorted(c["arch"] for c in scale) == ["compute_80", "sm_80", "sm_90a"]
    assert all(c["source"].startswith("src/toy_scale.x2.") for c in scale)
    rows = {(v["name"], v["arch"]): v for v in manifest["variants"]}
    assert (
        rows[("toy_scale_bf16_n256", "sm_80")]["blob"]
        == rows[("toy_scale_bf16_any", "sm_80")]["blob"]
    )
    assert manifest["ptx"] == ["compute_80"]
    rows = {(v["name"], v["arch"]): v for v in manifest["variants"]}
    assert rows[("toy_scale_bf16_any", "sm_86")]["blob_arch"] == "sm_80"
    ptx = rows[("toy_scale_bf16_any", "compute_80")]
    assert ptx["blob_arch"] == "compute_80" and cubins[ptx["blob"]]["cubin"].endswith(".ptx")
    # PTX rows come last in their group: the runtime ranks them below every SASS row.
    archs = [v["arch"] for v in manifest["variants"] if v["name"] == "toy_scale_bf16_any"]
    assert archs == ["sm_90a", "sm_86", "sm_80", "compute_80"]
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


# ---- embedded blobs: build_tools/blob.py packs, cmake/TileaotCubins.cmake embeds ---------------


def _fake_cubin(n: int, word: bytes = b"sm_90a kernel ") -> bytes:
    """An ELF-shaped image (its section header table ends it) with a compressible body."""
    image = bytearray((word * (n // len(word) + 1))[:n])
    image[:64] = b"\x7fELF" + bytes(60)
    struct.pack_into("<QQ", image, 0x20, 0, n - 128)  # e_phoff, e_shoff
    struct.pack_into("<HHHH", image, 0x36, 0, 0, 64, 2)  # phentsize, phnum, shentsize, shnum
    return bytes(image)


def test_blob_round_trips_compressed_or_stored():
    cubin = _fake_cubin(8192)
    blob = pack(cubin)
    assert blob[:8] == struct.pack("<Q", 8192) and len(blob) < 8192 // 4  # level-9 zlib
    assert zlib.decompress(blob[8:]) == cubin and unpack(blob) == cubin
    noise = random.Random(0).randbytes(4096)  # does not get smaller: stored as is
    assert pack(noise) == bytes(8) + noise and unpack(pack(noise)) == noise
    assert pack(cubin, compress=False) == bytes(8) + cubin
    with pytest.raises(ValueError, match="header says 8193"):
        unpack(struct.pack("<Q", 8193) + blob[8:])
    with pytest.raises(ValueError, match="zlib stream is corrupt"):
        unpack(blob[:20] + bytes([blob[20] ^ 0x5A]) + blob[21:])
    with pytest.raises(ValueError, match="8-byte header"):
        unpack(blob[:5])


def test_packing_is_deterministic_and_leaves_an_unchanged_blob_alone(tmp_path):
    cubin = tmp_path / "k.sm_90a.cubin"
    cubin.write_bytes(_fake_cubin(20000))
    out = tmp_path / "blobs" / "k.sm_90a.cubin.blob"

    def run(*cmd: str) -> None:
        subprocess.run([sys.executable, "-m", *cmd], check=True, cwd=ROOT)

    run("build_tools.blob", str(cubin), "-o", str(out))  # what CMake runs
    first, mtime = out.read_bytes(), out.stat().st_mtime_ns
    assert first == pack(cubin.read_bytes())
    run("build_tools.blob", str(cubin), "-o", str(out))
    assert out.read_bytes() == first and out.stat().st_mtime_ns == mtime  # not rewritten
    run("build_tools", "pack", str(cubin), "-o", str(tmp_path / "again.blob"))
    assert (tmp_path / "again.blob").read_bytes() == first


def test_embedded_cubins_are_found_stored_or_compressed():
    stored, compressed = _fake_cubin(4096, b"stored "), _fake_cubin(9000)
    filler = random.Random(1).randbytes(3000)
    library = b"\x7fELF" + filler + pack(compressed)[8:] + filler + stored + filler
    assert sorted(embedded_cubins(library)) == sorted([stored, compressed])


DUMP_CPP = """
#include <cstdio>
#include <string>

#include "blob.h"

namespace tileaot::detail {
%s
}  // namespace tileaot::detail

// Per blob: arch, recorded inflated size, payload and the image the runtime would load (hex).
int main() {
  using namespace tileaot::detail;
  auto hex = [](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) std::printf("%%02x", static_cast<const unsigned char*>(p)[i]);
  };
  for (int32_t i = 0; i < kNumBlobs; ++i) {
    const Blob& blob = kBlobs[i];
    BlobImage image;
    std::string detail;
    if (image.open(blob, &detail) != BlobImage::kOk) {
      std::printf("%%s\\n", detail.c_str());
      return 1;
    }
    std::printf("%%s %%llu ", blob.compiled_arch, (unsigned long long)*blob.inflated_size);
    hex(blob.data, blob.size);
    std::printf(" ");
    hex(image.data(), image.size());
    std::printf("\\n");
  }
}
"""

EMBED_CMAKE = """
cmake_minimum_required(VERSION 3.24)
project(embed_check CXX ASM)
find_package(Python REQUIRED COMPONENTS Interpreter)
find_package(ZLIB REQUIRED)
include("{root}/cmake/TileaotCubins.cmake")
tileaot_add_cubins(GEN "{gen}" ENTRIES {entries} PREBUILT ON COMPRESS ON
                   OUT_CUBINS cubins OUT_BLOBS blobs OUT_ASM asm)
add_executable(dump dump.cpp "{root}/cpp/runtime/blob.cpp" "${{asm}}" ${{blobs}})
set_source_files_properties(${{blobs}} PROPERTIES HEADER_FILE_ONLY ON)
set_source_files_properties("${{asm}}" PROPERTIES OBJECT_DEPENDS "${{blobs}}")
set_target_properties(dump PROPERTIES CXX_STANDARD 17)
target_include_directories(dump PRIVATE "{root}/cpp/runtime")
target_compile_definitions(dump PRIVATE TILEAOT_HAVE_ZLIB=1)
target_link_libraries(dump PRIVATE ZLIB::ZLIB)
"""


@pytest.mark.skipif(
    not (shutil.which("cmake") and shutil.which("ninja") and shutil.which("c++")),
    reason="needs cmake, ninja and a C++ compiler",
)
def test_embed_step_puts_each_blob_and_its_size_behind_the_generated_table(tmp_path):
    """The real packer, blobs.S and generated kBlobs table, built twice: the embedded payloads
    are the packed bytes, the recorded sizes right, the runtime's images the cubins, and both
    builds embed the same bytes."""
    gen = tmp_path / "gen"
    noise = random.Random(2).randbytes(2000)
    cubins = {"a.sm_90a.cubin": _fake_cubin(12000), "b.sm_80.cubin": noise}
    for name, data in cubins.items():
        (gen / "cubin").mkdir(parents=True, exist_ok=True)
        (gen / "cubin" / name).write_bytes(data)
    blobs = [{"symbol": f"tileaot_blob_{i}", "arch": n.split(".")[1]} for i, n in enumerate(cubins)]
    entries = " ".join(
        f'"src/{n}.cu|{b["arch"]}|cubin/{n}|{b["symbol"]}"'
        for n, b in zip(cubins, blobs, strict=True)
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(EMBED_CMAKE.format(root=ROOT, gen=gen, entries=entries))
    (project / "dump.cpp").write_text(DUMP_CPP % emit_blob_table(blobs))
    dumps = []
    for build in ("b1", "b2"):
        cfg = [f"-DPython_EXECUTABLE={sys.executable}", "-G", "Ninja"]
        subprocess.run(["cmake", "-S", project, "-B", tmp_path / build, *cfg], check=True)
        subprocess.run(["cmake", "--build", tmp_path / build], check=True)
        out = subprocess.run([tmp_path / build / "dump"], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout
        dumps.append(out.stdout.split())
    assert dumps[0] == dumps[1]
    rows = [dumps[0][i : i + 4] for i in (0, 4)]
    for (name, data), row in zip(cubins.items(), rows, strict=True):
        packed = pack(data)
        assert row[0] == name.split(".")[1] and int(row[1]) == struct.unpack("<Q", packed[:8])[0]
        assert bytes.fromhex(row[2]) == packed[8:] and bytes.fromhex(row[3]) == data
    assert int(dumps[0][1]) == 12000 and int(dumps[0][5]) == 0  # compressed, stored
