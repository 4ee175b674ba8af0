"""The generic variants' SASS (issue 20, item 5), checked on the CPU.

Each generic kernel is lowered by TileLang, compiled by NVRTC for sm_90a and disassembled with
cuobjdump (+ nvdisasm): its aligned path must move data with 16-byte global loads and stores
(LDG.E.128 / STG.E.128), and its register count must leave enough blocks per SM to keep the
memory system busy (bytes in flight per SM of at least an H200's bandwidth x latency share).

Skipped without tilelang, NVRTC, or cuobjdump/nvdisasm. They come from PyPI:
``pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`` (both put their binaries under
``site-packages/nvidia/cu13/bin``), or set ``TILEAOT_CUOBJDUMP`` to a cuobjdump whose folder
also holds nvdisasm.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _lowering import lower_source, needs_tilelang

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# An H200 moves ~4.8 TB/s at ~1 µs of DRAM latency under load: ~36 KB per SM (132 SMs) must be
# in flight to stream at full bandwidth. Ask for 32 KiB of 16-byte loads in flight per SM.
MIN_BYTES_IN_FLIGHT = 32 * 1024
SM90_REGS, SM90_THREADS, SM90_BLOCKS = 65536, 2048, 32  # per SM
SM90_SMEM = 228 * 1024


def _cuobjdump() -> str | None:
    """cuobjdump with nvdisasm beside it (cuobjdump -sass runs nvdisasm), or None."""
    candidates = [os.environ.get("TILEAOT_CUOBJDUMP"), shutil.which("cuobjdump")]
    spec = importlib.util.find_spec("nvidia")
    for root in spec.submodule_search_locations if spec else ():
        candidates += [str(p) for p in sorted(Path(root).glob("cu*/bin/cuobjdump"))]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            folder = Path(c).parent
            if (folder / "nvdisasm").exists() or shutil.which("nvdisasm"):
                return c
    return None


CUOBJDUMP = _cuobjdump()
needs_cuobjdump = pytest.mark.skipif(
    CUOBJDUMP is None,
    reason="needs cuobjdump + nvdisasm (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)",
)


def _sass(func, name: str, tmp_path: Path) -> tuple[str, dict[str, int]]:
    """(SASS text, resource usage {"REG": .., "SHARED": ..}) of prim_func `func` on sm_90a."""
    compile_mod = pytest.importorskip("build_tools.compile")
    from build_tools.cache import Cache

    try:
        compile_mod.find_toolchain("nvrtc")
        compile_mod.kernel_include_dirs()
    except Exception as e:  # CompileError: no NVRTC, or no tilelang headers on this machine
        pytest.skip(f"needs NVRTC and tilelang's headers: {e}")
    src = tmp_path / f"{name}.cu"
    src.write_text(lower_source(func, "sm_90a", name))
    out = tmp_path / f"{name}.cubin"
    compile_mod.compile_source(src, "sm_90a", out, "nvrtc", cache=Cache(tmp_path / "cache"))
    env = {**os.environ, "PATH": f"{Path(CUOBJDUMP).parent}{os.pathsep}{os.environ['PATH']}"}

    def run(*args: str) -> str:
        return subprocess.run(
            [CUOBJDUMP, *args, str(out)], capture_output=True, text=True, check=True, env=env
        ).stdout

    usage = re.search(r"REG:(\d+).*?SHARED:(\d+)", run("-res-usage"))
    assert usage, "cuobjdump -res-usage printed no REG/SHARED"
    return run("-sass"), {"REG": int(usage[1]), "SHARED": int(usage[2])}


def _blocks_per_sm(threads: int, usage: dict[str, int]) -> int:
    regs = -(-usage["REG"] * 32 // 256) * 256 * (threads // 32)  # allocated per warp, 256 at a time
    by_smem = SM90_SMEM // max(usage["SHARED"] + 1024, 1)  # + 1 KiB reserved per block
    return min(SM90_REGS // regs, SM90_THREADS // threads, SM90_BLOCKS, by_smem)


def _accesses(sass: str) -> dict[str, int]:
    ops = re.findall(r"\b((?:LDG|STG)\.E[A-Z0-9.]*)", sass)
    return {
        "ld128": sum(op.startswith("LDG.E.128") for op in ops),
        "st128": sum(op.startswith("STG.E.128") for op in ops),
    }


@needs_tilelang
@needs_cuobjdump
def test_generic_rms_norm_streams_16_byte_vectors(tmp_path):
    from kernels_py.norm import rms_norm

    sass, usage = _sass(rms_norm.factory(arch="sm_90a", dtype="bfloat16"), "rms_g", tmp_path)
    acc = _accesses(sass)
    assert acc["ld128"] >= 2 and acc["st128"] >= 1, acc  # x (both passes), weight; y
    threads = rms_norm.GENERIC_THREADS
    blocks = _blocks_per_sm(threads, usage)
    in_flight = blocks * threads * rms_norm.GENERIC_UNROLL * 16  # one row per block
    assert in_flight >= MIN_BYTES_IN_FLIGHT, (usage, blocks, in_flight)


@needs_tilelang
@needs_cuobjdump
def test_static_padded_rms_norm_streams_16_byte_vectors(tmp_path):
    """N = 2880: the padded row keeps 16-byte accesses and no scalar ones."""
    from kernels_py.norm import rms_norm

    func = rms_norm.factory(arch="sm_90a", dtype="bfloat16", N=2880)
    sass, _ = _sass(func, "rms_2880", tmp_path)
    threads, padded = rms_norm.row_layout(2880, 8)
    per_thread = padded // (threads * 8)  # 16-byte vectors of x per thread
    assert _accesses(sass) == {"ld128": 2 * per_thread, "st128": per_thread}
    assert not re.search(r"\b(?:LDG|STG)\.E\.U16", sass)


@needs_tilelang
@needs_cuobjdump
def test_generic_swiglu_streams_16_byte_vectors(tmp_path):
    from kernels_py.act import swiglu

    sass, usage = _sass(swiglu.factory(arch="sm_90a", dtype="bfloat16"), "sw_g", tmp_path)
    acc = _accesses(sass)
    rows = swiglu.ROWS
    assert acc["ld128"] >= 2 * rows and acc["st128"] >= rows, acc  # gate + up, y per row
    blocks = _blocks_per_sm(swiglu.THREADS, usage)
    in_flight = blocks * swiglu.THREADS * 2 * rows * 16
    assert in_flight >= MIN_BYTES_IN_FLIGHT, (usage, blocks, in_flight)


# Issue 20: a generic variant's registers at most its specialised siblings' (48-56 for swiglu
# on sm_90a, NVRTC 12.9) plus a little for the runtime strides. It was once set by something
# other than the path that streams: swiglu's fully unrolled element path (128 for bf16/fp16,
# 66 for fp32). swiglu_per_token_cast_fp8's generic kernel holds two (row, group) pairs per
# thread (32 fp32 of gate and up: 56 registers, against 35-36 for one pair in the specialised
# ones), which was faster on the H200 (kernels_py/act/swiglu_per_token_cast_fp8.py FLAT_GROUPS);
# its bound is that, and the loads in flight it leaves. A first flat layout with an int64
# division inside every index took 40 for one pair.
SWIGLU_GENERIC_MAX_REGS = 60
SWIGLU_FP8_GENERIC_MAX_REGS = 58


@needs_tilelang
@needs_cuobjdump
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_generic_swiglu_registers(tmp_path, dtype):
    """The element path (H % vec != 0) shares the generic kernel: it must not raise the
    register count, and so the occupancy, of the aligned path."""
    from kernels_py.act import swiglu

    _, usage = _sass(swiglu.factory(arch="sm_90a", dtype=dtype), f"sw_g_{dtype}", tmp_path)
    assert usage["REG"] <= SWIGLU_GENERIC_MAX_REGS, usage


@needs_tilelang
@needs_cuobjdump
def test_generic_swiglu_per_token_cast_fp8_streams_16_byte_vectors(tmp_path):
    """Gate and up in 16-byte loads, within the register bound (the flat grid itself:
    test_kernels_cpu_swiglu)."""
    from kernels_py.act import swiglu_per_token_cast_fp8 as op

    sass, usage = _sass(op.factory(arch="sm_90a", dtype="bfloat16"), "swq_g", tmp_path)
    assert _accesses(sass)["ld128"] >= 2, _accesses(sass)
    assert usage["REG"] <= SWIGLU_FP8_GENERIC_MAX_REGS, usage
    pairs = op.FLAT_GROUPS * (op.GROUP // op.VEC) // op.THREADS  # per thread
    in_flight = _blocks_per_sm(op.THREADS, usage) * op.THREADS * 2 * pairs * 16  # gate + up
    assert in_flight >= MIN_BYTES_IN_FLIGHT, (usage, in_flight)


@needs_tilelang
@needs_cuobjdump
def test_generic_engram_gate_streams_16_byte_vectors(tmp_path):
    """The aligned path with its loop layouts given (kernels_py/engram chunk_layout): h, k (the
    sums), h, v (the output) in 16-byte loads, GENERIC_UNROLL of each per chunk; out stored so."""
    from kernels_py.engram import engram_gate

    sass, _ = _sass(engram_gate.factory(arch="sm_90a", dtype="bfloat16"), "eg_g", tmp_path)
    acc = _accesses(sass)
    unroll = engram_gate.GENERIC_UNROLL
    assert acc["ld128"] >= 4 * unroll and acc["st128"] >= unroll, acc


@needs_tilelang
@needs_cuobjdump
def test_generic_engram_gate_backward_streams_16_byte_vectors(tmp_path):
    """go, h, k, v (the row sums) in 16-byte loads; grad_v and the fp32 partial sums stored so."""
    from kernels_py.engram import engram_gate_backward

    func = engram_gate_backward.factory(arch="sm_90a", dtype="bfloat16")
    sass, _ = _sass(func, "egb_g", tmp_path)
    acc = _accesses(sass)
    assert acc["ld128"] >= 4 and acc["st128"] >= 2, acc


# Issue 18: expand_to_fused's data path (shared by expand_to_fused_with_sf) once held a whole
# chunk in registers on its scalar path (64 fp8 / 32 bf16 elements, one register each) and let
# nvcc unroll the K loop: 168 registers per thread on sm_90a (92 bf16; 144 for the column-major
# scales), 3 blocks of 128 threads per SM, 15 % achieved occupancy and 46 % of DRAM bandwidth
# on the H200. Now 36 and 42 (NVRTC, sm_90a): at most 48 keeps >= 10 blocks per SM (62.5 %
# occupancy), 80 KiB of 16-byte loads in flight.
EXPAND_TO_FUSED_MAX_REGS = 48


@needs_tilelang
@needs_cuobjdump
@pytest.mark.parametrize(
    "op, key",
    [("expand_to_fused", {"dtype": d}) for d in ("bfloat16", "float8_e4m3fn")]
    + [
        ("expand_to_fused_with_sf", {"dtype": "float8_e4m3fn", "sf_dtype": s, "layout": lay})
        for s in ("float32", "int32")
        for lay in ("row", "col")
    ],
    ids=lambda v: "-".join(v.values()) if isinstance(v, dict) else v,
)
def test_expand_to_fused_registers(tmp_path, op, key):
    """Both ops' kernels: 16-byte loads and stores on the aligned path (the chunk's four
    vectors), and registers within EXPAND_TO_FUSED_MAX_REGS (the occupancy of a copy)."""
    import importlib

    from kernels_py.moe import expand_to_fused as etf

    name = "_".join([op, *key.values()])
    func = importlib.import_module(f"kernels_py.moe.{op}").factory(arch="sm_90a", **key)
    sass, usage = _sass(func, name, tmp_path)
    acc = _accesses(sass)
    assert acc["ld128"] >= etf.UNROLL and acc["st128"] >= etf.UNROLL, (name, acc)
    assert usage["REG"] <= EXPAND_TO_FUSED_MAX_REGS, (name, usage)
    blocks = _blocks_per_sm(etf.THREADS, usage)
    assert blocks * etf.THREADS * etf.UNROLL * 16 >= MIN_BYTES_IN_FLIGHT, (name, usage, blocks)
