"""Reproducible tracing: the same variant traced in fresh processes gives the same data.

TileLang 0.1.15 assigns same-named shared buffers (reduction workspaces) to slots in an
order that follows heap addresses; build_tools/smem_slots.py makes the source canonical.
The end-to-end test traces one variant of every op in three fresh processes (address space
randomisation, different PYTHONHASHSEED, different heap junk) and compares everything the
manifest and the generated sources are made of. The unit tests below need no tilelang.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _lowering import needs_tilelang

from build_tools.smem_slots import Slot, canonical_kernel, exchangeable_groups

ROOT = Path(__file__).resolve().parents[1]

# One cheap variant per op (sm_90a), generic where that is cheap; engram_gate's generic and
# engram_gate_backward's static variants are the ones that varied before smem_slots.py.
# About 30 s of lowering per process.
VARIANTS = (
    "rms_norm_bf16_any",
    "per_token_cast_fp8_bf16_g128_n4096",
    "gemm_bf16_n7168_k2048",
    "topk_gate_fp32_softmax_e128",
    "top2_sum_gate_fp32_sigmoid_e160",
    "swiglu_bf16_h2048",
    "swiglu_per_token_cast_fp8_bf16_h2048",
    "swiglu_backward_fp32_g128_any",
    "transpose_bf16_any",
    "sinkhorn_normalize_fp32_n4",
    "sinkhorn_normalize_backward_fp32_n4",
    "per_block_cast_fp8_bf16_n2048",
    "cast_back_fp8_bf16_g128_any",
    "moe_expand_bf16_e256",
    "moe_reduce_bf16_bf16_weighted_any",
    "engram_gate_bf16_any",
    "engram_gate_save_bf16_any",
    "engram_gate_backward_bf16_h2048",
    "engram_hash_i32_any",
    "per_token_cast_fp4_bf16_g16_ue8m0_any",
    "cast_back_fp4_bf16_g16_ue8m0_any",
    "topk_sum_and_topk_group_idx_fp32_any",
    "normalize_weight_fp32_any",
    "mask_indices_by_tp_i32_any",
    "group_count_i32_any",
    "aux_fi_i32_any",
    "inplace_unique_group_indices_i32_any",
    "expand_to_mhc_bf16_any",
    "expand_to_mhc_backward_bf16_any",
    "mhc_pre_apply_mix_bf16_any",
    "mhc_pre_apply_mix_backward_bf16_any",
    "mhc_post_bf16_any",
    "mhc_post_backward_bf16_any",
    "per_channel_cast_fp8_bf16_any",
    "mhc_pre_norm_fn_bf16_any",
    "mhc_pre_norm_fn_backward_bf16_any",
    "expand_to_fused_bf16_any",
    "per_token_cast_e5m6_bf16_any",
    "cast_back_e5m6_fp32_any",
    "expand_to_fused_with_sf_e4m3_fp32_col_any",
    "per_channel_cast_fused_e4m3_any",
    "engram_fused_weight_bf16_any",
    "engram_grad_w_reduce_bf16_any",
    "per_channel_cast_and_transpose_bf16_g32_any",
    "swiglu_per_channel_cast_and_transpose_bf16_g128_any",
    "per_block_cast_lossless_fp32_u8_any",
    "mhc_pre_split_mixes_fp32_any",
    "mhc_head_compute_mix_fp32_any",
    "mhc_pre_split_mixes_backward_fp32_any",
    "mhc_head_compute_mix_backward_fp32_any",
)
# engram_gate's static variant on the archs where its reductions share one slot under
# several alias names, whose use varied (on sm_90a it did not).
OTHER_ARCHS = {"sm_80": ("engram_gate_bf16_h4096",), "sm_100a": ("engram_gate_bf16_h7168",)}
SEEDS = (0, 1, 2)


def trace_variants_main() -> None:
    """Child process: trace VARIANTS (sm_90a) and OTHER_ARCHS, print
    {"name@arch": {"op", "signature", "lowered"}} as JSON.

    Heap junk of a seed-dependent size first, so that heap addresses differ between the
    children even where address space randomisation is off."""
    seed = int(os.environ["PYTHONHASHSEED"])
    junk = [bytearray(1000 + 97 * i) for i in range(300 * seed)]  # noqa: F841 - kept alive
    from dataclasses import asdict

    from build_tools.matrix import enumerate_variants
    from build_tools.trace import trace
    from kernels_py import all_specs

    out = {}
    for arch, names in {"sm_90a": VARIANTS, **OTHER_ARCHS}.items():
        for point in enumerate_variants(all_specs(), (arch,), names):
            sig, lowered = trace(point, arch)
            out[f"{point.name}@{arch}"] = {
                "op": point.spec.op,
                "signature": asdict(sig),
                "lowered": lowered,
            }
    json.dump(out, sys.stdout, sort_keys=True)


@needs_tilelang
def test_fresh_processes_trace_identically(tmp_path):
    env = dict(
        os.environ,
        PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
        TILELANG_CACHE_DIR=str(tmp_path / "tlcache"),
    )
    env.pop("TILEAOT_CONFIG", None)  # a bring-your-shapes file would narrow the variants
    code = "import test_trace_determinism as t; t.trace_variants_main()"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=env | {"PYTHONHASHSEED": str(seed)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in SEEDS
    ]
    runs = []
    for child in children:
        out, err = child.communicate(timeout=1500)  # 3 processes on 2 shared cores: slow, not hung
        assert child.returncode == 0, err[-3000:]
        runs.append(json.loads(out))

    from kernels_py import all_specs

    assert len(runs[0]) == len(VARIANTS) + sum(map(len, OTHER_ARCHS.values())), sorted(runs[0])
    ops = {v["op"] for v in runs[0].values()}
    missing = sorted({s.op for s in all_specs()} - ops)
    assert not missing, f"add a variant of {missing} to VARIANTS"
    for seed, run in zip(SEEDS[1:], runs[1:], strict=True):
        assert run.keys() == runs[0].keys()
        for name in run:
            assert run[name] == runs[0][name], _difference(name, runs[0][name], run[name], seed)


def _difference(name: str, a: dict, b: dict, seed: int) -> str:
    src_a, src_b = a["lowered"]["source"], b["lowered"]["source"]
    if src_a == src_b:
        return f"{name}: traced data differs (seed {SEEDS[0]} vs {seed}), sources agree"
    diff = difflib.unified_diff(src_a.splitlines(), src_b.splitlines(), lineterm="", n=0)
    return f"{name}: source differs (seed {SEEDS[0]} vs {seed}):\n" + "\n".join(list(diff)[:30])


# ---------------------------------------------------------------------------------------------
# smem_slots on hand-written sources (no tilelang)
# ---------------------------------------------------------------------------------------------

KERNEL = """\
extern "C" __global__ void k(float* x);
extern "C" __global__ void __launch_bounds__(256, 1) k(float* x) {
  extern __shared__ __align__(1024) uchar buf_dyn_shmem[];
  void* pacc = ((void*)((char*)buf_dyn_shmem + 0));
  void* workspace = ((void*)((char*)buf_dyn_shmem + 8192));
  void* workspace_1 = ((void*)((char*)buf_dyn_shmem + 9216));
  void* workspace_2 = ((void*)((char*)buf_dyn_shmem + 10240));
  a[0] = run(a[0], (&(((float*)USE_A)[0])));
  b[0] = run(b[0], (&(((float*)USE_B)[0])));
  c[0] = run(c[0], (&(((float*)USE_C)[0]))) + ((float*)pacc)[0];
}

extern "C" __global__ void __launch_bounds__(256, 1) k_1(float* x) {
  extern __shared__ __align__(1024) float workspace[];
  t[0] = run(t[0], (&(workspace[0])));
}
"""
SLOTS = [
    Slot("pacc", "float32", 0, 8192),
    Slot("workspace", "float32", 8192, 1024),
    Slot("workspace", "float32", 9216, 1024),
    Slot("workspace", "float32", 10240, 1024),
]


def _kernel(a: str, b: str, c: str) -> str:
    return KERNEL.replace("USE_A", a).replace("USE_B", b).replace("USE_C", c)


def test_permuted_workspaces_become_one_source():
    """Every assignment of the three same-size workspaces canonicalises to the same text:
    the first reduction gets the lowest offset, pacc and the second kernel stay as they are."""
    names = ("workspace", "workspace_1", "workspace_2")
    orders = [(a, b, c) for a in names for b in names for c in names if len({a, b, c}) == 3]
    outputs = {canonical_kernel(_kernel(*order), "k", SLOTS) for order in orders}
    assert outputs == {_kernel("workspace", "workspace_1", "workspace_2")}


def test_declarations_follow_the_first_use():
    """Uses keep pointing at one slot each: a workspace used twice is renamed both times."""
    text = _kernel("workspace_2", "workspace", "workspace_2")
    out = canonical_kernel(text, "k", SLOTS)
    assert "(&(((float*)workspace)[0])));\n  b[0] = run(b[0], (&(((float*)workspace_1)" in out
    assert "c[0] = run(c[0], (&(((float*)workspace)[0])))" in out
    # workspace_2 is unused now; it keeps the one offset left over.
    assert "void* workspace_2 = ((void*)((char*)buf_dyn_shmem + 10240));" in out


def _use_offsets(text: str) -> list[int]:
    """The arena offset each of the kernel's three reductions uses, in code order."""
    decls = dict(re.findall(r"void\* (\w+) = \(\(void\*\)\(\(char\*\)buf_dyn_shmem \+ (\d+)", text))
    uses = re.findall(r"\(&\(\(\(float\*\)(\w+)\)\[0\]\)\)", text)
    return [int(decls[n]) for n in uses]


@pytest.mark.parametrize(
    "slots",
    [
        # pacc overlaps a workspace (reuse by a disjoint live range): slots are not exclusive.
        [Slot("pacc", "float32", 0, 9000), *SLOTS[1:]],
        # An access without a constant extent could reach any slot.
        [Slot("pacc", "float32", 0, None), *SLOTS[1:]],
    ],
    ids=["overlap", "unknown-size"],
)
def test_unprovable_slots_do_not_move(slots):
    """Without the proof only names change: every use keeps its offset."""
    text = _kernel("workspace_2", "workspace", "workspace_1")
    out = canonical_kernel(text, "k", slots)
    assert _use_offsets(out) == _use_offsets(text) == [10240, 8192, 9216]
    assert "(&(((float*)workspace)[0])));\n  b[0]" in out  # first used, first name


def test_source_that_disagrees_with_the_tir_is_left_alone():
    text = _kernel("workspace_2", "workspace", "workspace_1")
    assert canonical_kernel(text, "k", SLOTS[1:]) == text


def test_aliases_of_one_address_get_names_by_first_use():
    """TileLang reuses one slot for reductions with disjoint live ranges; which alias name
    each use got still varied between runs (sm_80, sm_100a engram_gate static)."""
    text = (
        _kernel("USE_A", "USE_B", "USE_C").replace("+ 9216", "+ 8192").replace("+ 10240", "+ 8192")
    )
    slots = [SLOTS[0], *(Slot("workspace", "float32", 8192, 1024) for _ in range(3))]
    names = ("workspace", "workspace_1", "workspace_2")
    outputs = {
        canonical_kernel(
            text.replace("USE_A", a).replace("USE_B", b).replace("USE_C", c), "k", slots
        )
        for a in names
        for b in names
        for c in names
        if len({a, b, c}) == 3
    }
    assert len(outputs) == 1
    assert _use_offsets(outputs.pop()) == [8192, 8192, 8192]


def test_groups_need_same_name_and_size():
    slots = [*SLOTS, Slot("workspace", "float32", 11264, 512), Slot("tile", "float32", 12288, 1024)]
    groups = exchangeable_groups(slots)
    assert [[s.offset for s in g] for g in groups] == [[8192, 9216, 10240]]
