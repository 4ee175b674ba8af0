"""The sdist path on the CPU: header closure, the staged tree and archive, and CMake's refusal of
a request the bundled sources were not generated for. The end-to-end build of an sdist in a
fresh virtualenv without tilelang/torch is scripts/sdist_check.sh."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from build_tools import sdist
from build_tools.headers import include_closure

ROOT = Path(__file__).resolve().parents[1]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def include_roots(tmp_path):
    """Two header roots like tilelang's src/ and cutlass/include/."""
    tl, cutlass = tmp_path / "tl", tmp_path / "cutlass"
    _write(tl / "tl_templates/cuda/nvrtc_std.h", "#pragma once\n")
    _write(
        tl / "tl_templates/cuda/common.h",
        '#include "helper.h"\n#ifdef __CUDACC_RTC__\n  #  include <cute/tensor.hpp>\n#endif\n'
        "#include <cuda_fp16.h>\n#include CUDA_STD_HEADER(cstdint)\n",
    )
    _write(tl / "tl_templates/cuda/helper.h", "#include <tl_templates/cuda/common.h>\n")  # cycle
    _write(cutlass / "cute/tensor.hpp", '#include "layout.hpp"\n')
    _write(cutlass / "cute/layout.hpp", "")
    _write(cutlass / "cute/unused.hpp", "")
    return [tl, cutlass]


def test_include_closure_follows_every_branch_and_stays_in_the_roots(include_roots):
    found = include_closure(["#include <tl_templates/cuda/common.h>\n"], include_roots)
    assert list(found) == [
        "cute/layout.hpp",
        "cute/tensor.hpp",
        "tl_templates/cuda/common.h",
        "tl_templates/cuda/helper.h",
    ]
    assert found["cute/layout.hpp"] == include_roots[1] / "cute" / "layout.hpp"


@pytest.fixture
def staged(tmp_path, include_roots, monkeypatch):
    """The staged tree for a fake gen folder (what `generate` writes, plus its caches)."""
    gen = tmp_path / "gen"
    _write(gen / "src" / "k_any.1234.cu", "#include <tl_templates/cuda/common.h>\n")
    _write(gen / "registry.cpp", "// registry\n")
    _write(
        gen / "cubins.cmake", 'set(TILEAOT_CUBINS "src/k_any.1234.cu|sm_90a|cubin/k.cubin|b0")\n'
    )
    manifest = {"archs": ["sm_80", "sm_90a"], "ops": ["k*"], "variants": [], "cubins": []}
    _write(gen / "manifest.json", json.dumps(manifest))
    _write(gen / ".tlcache" / "junk", "")
    _write(gen / "cubin" / "stale.cubin", "")
    config = _write(tmp_path / "model.toml", "[ops.rms_norm]\n")
    monkeypatch.setenv("TILEAOT_INCLUDE_DIRS", os.pathsep.join(map(str, include_roots)))
    return sdist.stage_tree(tmp_path / "stage", gen, str(config))


def test_stage_holds_the_checkout_the_gen_outputs_and_their_headers(staged):
    bundle = staged / "gen"
    assert (staged / "CMakeLists.txt").is_file() and (staged / "build_tools").is_dir()
    assert not (staged / "build").exists() and not (staged / ".git").exists()
    assert sorted(p.name for p in (bundle / "src").iterdir()) == ["k_any.1234.cu"]
    assert not (bundle / ".tlcache").exists() and not (bundle / "cubin").exists()
    assert (bundle / "include/tl_templates/cuda/nvrtc_std.h").is_file()  # the NVRTC prelude's
    assert (bundle / "include/cute/layout.hpp").is_file()
    assert not (bundle / "include/cute/unused.hpp").exists()
    assert "BSD-3-Clause" in (bundle / "include/NOTICE").read_text()
    assert (bundle / "config.toml").read_text() == "[ops.rms_norm]\n"
    text = (bundle / "bundle.cmake").read_text()
    assert 'set(TILEAOT_BUNDLE_ARCHS "sm_80;sm_90a")' in text
    assert 'set(TILEAOT_BUNDLE_OPS "k*")' in text
    assert 'set(TILEAOT_BUNDLE_CONFIG "model.toml")' in text
    assert "set(TILEAOT_BUNDLE_CUBINS OFF)" in text


def test_the_archive_is_the_backends_sdist_with_gen(staged, tmp_path):
    archive = sdist.build_sdist(staged, tmp_path / "dist")
    with tarfile.open(archive) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"PKG-INFO", "pyproject.toml", "CMakeLists.txt", "build_tools/compile.py"} <= names
    assert {
        "gen/bundle.cmake",
        "gen/manifest.json",
        "gen/registry.cpp",
        "gen/cubins.cmake",
    } <= names
    assert {"gen/src/k_any.1234.cu", "gen/include/tl_templates/cuda/common.h"} <= names
    assert not any(n.startswith(("build/", "dist/")) for n in names)


def _cmake_check(
    tmp_path: Path, archs: str, ops: str, config: str = ""
) -> subprocess.CompletedProcess:
    script = _write(
        tmp_path / "check.cmake",
        # The arch list is normalised by `python -m build_tools archs`: scikit-build-core
        # defines Python_EXECUTABLE in a real build; a `cmake -P` script must set it.
        f'set(Python_EXECUTABLE "{sys.executable}")\n'
        f'include("{ROOT}/cmake/TileaotCubins.cmake")\n'
        f'include("{ROOT}/cmake/TileaotUserBuild.cmake")\n'
        'set(TILEAOT_BUNDLE_ARCHS "sm_80;sm_90a")\nset(TILEAOT_BUNDLE_OPS "rms_norm*")\n'
        'set(TILEAOT_BUNDLE_CONFIG "")\n'
        f'tileaot_normalize_archs(archs "{archs}")\n'
        f'tileaot_check_bundle("${{archs}}" "{ops}" "{config}")\n',
    )
    return subprocess.run(["cmake", "-P", str(script)], capture_output=True, text=True)


@pytest.mark.skipif(not shutil.which("cmake"), reason="needs cmake")
def test_cmake_refuses_a_request_the_bundle_was_not_made_for(tmp_path):
    assert _cmake_check(tmp_path, "90a,sm_80", "rms_norm*").returncode == 0
    bad = _cmake_check(tmp_path, "80", "gemm*", config="my.toml")
    assert bad.returncode != 0
    message = " ".join(bad.stderr.split())  # CMake wraps long messages
    for text in (
        "bundles generated sources for other options",
        "TILEAOT_ARCHS=sm_80, bundled: sm_80;sm_90a",
        "TILEAOT_OPS=gemm*, bundled: rms_norm*",
        "TILEAOT_CONFIG=my.toml",
        "python -m build_tools sdist",
    ):
        assert text in message
