"""The installed package as a user gets it: machine code per arch, no forbidden links, import
without torch/tilelang/driver, clear errors. Run against the installed wheel (see README)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from build_tools.blob import embedded_cubins
from build_tools.cubin import cubin_arch
from kernels_py.spec import DEFAULT_ARCHS

PKG = importlib.util.find_spec("tileaot")
if PKG is None or not PKG.submodule_search_locations:
    pytest.skip("tileaot is not installed (build the wheel first)", allow_module_level=True)
PKG_DIR = Path(PKG.submodule_search_locations[0])
LIB = PKG_DIR / "lib" / "libtileaot.so"
EXT = next(PKG_DIR.glob("_C.*so"), None)
# A reduced build (scripts/gpu_check.sh) says so; the default wheel must hold every arch.
REDUCED = os.environ.get("TILEAOT_REDUCED_BUILD") == "1"


def _native():
    from tileaot import _lib

    return _lib.native()


def _runs_on(code: str, arch: str) -> bool:
    """Whether code of target `code` (sm_90a, sm_100f, compute_80) runs where `arch` does."""
    from tileaot import _arch

    target = _arch.target(arch)
    return _arch.target(code).runs_on(target.major, target.minor)


def _embedded_cubin_archs(lib: Path) -> list[str]:
    """The SASS archs of the cubins in the library (stored zlib-compressed: build_tools/blob.py)."""
    archs = []
    for image in embedded_cubins(lib.read_bytes()):
        try:
            archs.append(cubin_arch(image))
        except (ValueError, IndexError, Exception):  # an ELF magic that is not a cubin
            continue
    return archs


def test_package_layout():
    assert LIB.is_file() and EXT is not None
    assert (PKG_DIR / "include" / "tileaot" / "tileaot.h").is_file()
    assert (PKG_DIR / "share" / "cmake" / "tileaot" / "tileaotConfig.cmake").is_file()


def test_every_built_arch_has_machine_code():
    built = _native().build_archs().split(",")
    if not REDUCED:
        assert tuple(built) == DEFAULT_ARCHS
    embedded = _embedded_cubin_archs(LIB)
    for arch in built:
        # Of its kind: an "a" target's cubin has the ELF's arch-specific flag; a family target's
        # reads as the plain SM (CUDA 12.9 marks families nowhere in the ELF).
        assert arch.removesuffix("f") in embedded, f"no {arch} cubin in {sorted(set(embedded))}"
    # And every variant row points at code that runs on the row's arch.
    for v in _native().variants():
        assert _runs_on(v["blob_arch"], v["arch"]), v


def test_ptx_rows_have_their_ptx():
    from build_tools.blob import embedded_ptx

    rows = [v for v in _native().variants() if v["arch"].startswith("compute_")]
    if not REDUCED or "sm_80" in _native().build_archs().split(","):
        assert rows, "a build with sm_80 embeds its PTX (the forward path)"
    targets = {
        t for p in embedded_ptx(LIB.read_bytes()) for t in re.findall(rb"\n\.target (\w+)", p)
    }
    for v in rows:
        assert v["blob_arch"] == v["arch"]
        want = "sm_" + v["arch"].removeprefix("compute_")
        assert want.encode() in targets, (v["name"], want, targets)


@pytest.mark.skipif(not shutil.which("readelf"), reason="needs binutils' readelf")
@pytest.mark.parametrize("path", [LIB, EXT], ids=["libtileaot", "_C"])
def test_links_neither_torch_nor_cudart(path):
    needed = subprocess.run(
        ["readelf", "-d", str(path)], capture_output=True, text=True, check=True
    ).stdout
    libs = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", needed)
    assert libs, needed
    forbidden = [lib for lib in libs if re.match(r"lib(torch|c10|cudart|cuda\.|nvrtc)", lib)]
    assert not forbidden, f"{path.name} links {forbidden}"


def test_import_needs_no_torch_tilelang_or_driver():
    code = (
        "import sys, tileaot\n"
        "assert 'torch' not in sys.modules and 'tilelang' not in sys.modules\n"
        "from tileaot import _lib\n"
        "n = _lib.native()\n"
        "assert 'torch' not in sys.modules\n"
        "print(len(n.variants()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True
    )
    assert int(out.stdout) > 0


def _have_driver() -> bool:
    return any(
        Path(p).exists()
        for p in (
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
            "/usr/lib64/libcuda.so.1",
            "/usr/local/nvidia/lib64",
        )
    )


@pytest.mark.skipif(_have_driver(), reason="a CUDA driver is installed here")
def test_call_without_driver_raises_a_clear_error():
    native = _native()
    handle = native.lookup("rms_norm", "bf16")
    with pytest.raises(native.DriverError, match="libcuda.so.1"):
        native.launch(handle, 0, 0, (16, 32, 48), (4, 4096, 4096, 4, 4096), (1e-6,))


def test_miss_error_names_op_key_built_keys_and_option():
    native = _native()
    with pytest.raises(native.VariantMissError) as err:
        native.lookup("rms_norm", "int8")
    text = str(err.value)
    assert "rms_norm" in text and "int8" in text and "bf16" in text
    assert "TILEAOT_OPS" in text or "kernels_py" in text
    with pytest.raises(LookupError, match="no_such_op"):
        native.lookup("no_such_op", "bf16")


def test_info_lists_archs_ops_and_variants():
    out = subprocess.run(
        [sys.executable, "-m", "tileaot", "info"], capture_output=True, text=True, cwd="/"
    )
    assert out.returncode == 0, out.stderr
    for word in ("sm_90a", "rms_norm", "per_token_cast_fp8", "gemm", "n4096", "bf16,g128"):
        assert word in out.stdout, word
