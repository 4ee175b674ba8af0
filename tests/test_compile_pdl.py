"""Programmatic dependent launch in device sources: TileLang writes the CUDA runtime's
cudaGridDependencySynchronize / cudaTriggerProgrammaticLaunchCompletion, whose header needs
crt/ headers the PyPI CUDA packages lack; the NVRTC prelude defines the two as PTX."""

from __future__ import annotations

import pytest

from build_tools import compile as compile_mod
from build_tools.cache import Cache
from build_tools.cubin import cubin_arch

PDL_KERNEL = (
    'extern "C" __global__ void pdl_k(int* p) {\n'
    "  cudaGridDependencySynchronize();\n"
    "  cudaTriggerProgrammaticLaunchCompletion();\n"
    "  p[threadIdx.x] = 1;\n"
    "}\n"
)


def test_nvrtc_prelude_defines_the_pdl_calls_without_the_runtime_header():
    src = compile_mod.prepare_source(PDL_KERNEL, "nvrtc", "k.cu")
    assert "cuda_device_runtime_api.h" not in src
    assert src.index("griddepcontrol.wait;") < src.index('#line 1 "k.cu"')
    assert src.index("griddepcontrol.launch_dependents;") < src.index('#line 1 "k.cu"')
    assert src.endswith(PDL_KERNEL)
    plain = compile_mod.prepare_source('extern "C" __global__ void k() {}\n', "nvrtc")
    assert "griddepcontrol" not in plain  # only sources that use PDL get the definitions
    assert compile_mod.prepare_source(PDL_KERNEL, "nvcc") == PDL_KERNEL  # nvcc has the header


def test_nvrtc_compiles_a_pdl_kernel_for_sm90a(tmp_path):
    try:
        compile_mod.find_toolchain("nvrtc")
        compile_mod.kernel_include_dirs()
    except Exception as e:  # CompileError: no NVRTC, or no tilelang headers on this machine
        pytest.skip(f"needs NVRTC and tilelang's headers: {e}")
    src = tmp_path / "pdl_k.cu"
    src.write_text(PDL_KERNEL)
    out = tmp_path / "pdl_k.cubin"
    compile_mod.compile_source(src, "sm_90a", out, "nvrtc", cache=Cache(tmp_path / "cache"))
    assert cubin_arch(out.read_bytes()) == "sm_90a"
