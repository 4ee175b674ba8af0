"""Every default target gets machine code of its kind from the build's compiler (NVRTC 12.9):
an "a" target a cubin flagged arch-specific in its ELF header, a family ("f") or plain target a
cubin of its SM without that flag (CUDA 12.9 marks families nowhere in the ELF: cuobjdump reads
sm_100f as sm_100 too), and the forward path's compute_80 PTX text naming `.target sm_80`,
NUL-terminated for cuModuleLoadData. Through build_tools.compile.compile_source, the build's path.
"""

from __future__ import annotations

import struct

import pytest

from build_tools import compile as compile_mod
from build_tools.cache import Cache
from build_tools.cubin import cubin_arch
from kernels_py.spec import DEFAULT_ARCHS

KERNEL = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n'


@pytest.fixture(scope="module")
def toolchain():
    try:
        compile_mod.find_toolchain("nvrtc")
        compile_mod.kernel_include_dirs()
    except Exception as e:  # CompileError: no NVRTC, or no tilelang headers on this machine
        pytest.skip(f"needs NVRTC and tilelang's headers: {e}")


def _compile(tmp_path, arch: str) -> bytes:
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    out = tmp_path / f"k.{arch}.bin"
    compile_mod.compile_source(src, arch, out, "nvrtc", cache=Cache(tmp_path / "cache"))
    return out.read_bytes()


def _arch_specific_flag(cubin: bytes) -> bool:
    """The ELF header's "a" bit (build_tools/cubin.py: 0x800 in ABI 7, 0x8 in ABI 8)."""
    (flags,) = struct.unpack_from("<I", cubin, 48)
    return bool(flags & 0x800) if cubin[8] == 7 else bool(flags & 0x8)


@pytest.mark.parametrize("arch", DEFAULT_ARCHS)
def test_default_target_cubin_kind(toolchain, tmp_path, arch):
    cubin = _compile(tmp_path, arch)
    assert cubin[:4] == b"\x7fELF"
    assert cubin_arch(cubin) == arch.removesuffix("f")
    assert _arch_specific_flag(cubin) == arch.endswith("a")


def test_forward_path_ptx(toolchain, tmp_path):
    ptx = _compile(tmp_path, "compute_80")
    assert ptx.endswith(b"\0") and b"\0" not in ptx[:-1]
    assert b"\n.target sm_80" in ptx and b".entry k(" in ptx


def test_check_ptx_refuses_other_targets():
    good = b"//\n.version 8.8\n.target sm_80\n.address_size 64\n\0"
    compile_mod.check_ptx(good, "compute_80")
    with pytest.raises(compile_mod.CompileError, match="expected PTX with '.target sm_80'"):
        compile_mod.check_ptx(good.replace(b"sm_80", b"sm_90"), "compute_80")
    with pytest.raises(compile_mod.CompileError, match="NUL-terminated"):
        compile_mod.check_ptx(good[:-1], "compute_80")


def test_normalize_arch_keeps_ptx_and_family():
    assert compile_mod.normalize_arch("compute_80") == "compute_80"
    assert compile_mod.normalize_arch("100f") == "sm_100f"
    assert compile_mod.normalize_arch("SM_90A") == "sm_90a"
