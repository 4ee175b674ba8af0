"""TileLang kernels that tileaot ships; one module per op, each exposing ``SPEC``.

Importing this package (or an op module) needs neither tilelang nor torch: factories and
references import them when called.
"""

from __future__ import annotations

import importlib

# One line per op module; all_specs() keeps this order (the build's variant order).
OP_MODULES = (
    "kernels_py.norm.rms_norm",
    "kernels_py.quant.per_token_cast_fp8",
    "kernels_py.gemm.gemm",
    "kernels_py.moe.topk_gate",
    "kernels_py.moe.top2_sum_gate",
    "kernels_py.moe.topk_sum_and_topk_group_idx",
    "kernels_py.moe.normalize_weight",
    "kernels_py.moe.mask_indices_by_tp",
    "kernels_py.moe.group_count",
    "kernels_py.moe.aux_fi",
    "kernels_py.moe.inplace_unique_group_indices",
    "kernels_py.act.swiglu",
    "kernels_py.act.swiglu_per_token_cast_fp8",
    "kernels_py.act.swiglu_per_channel_cast_and_transpose",
    "kernels_py.act.swiglu_backward",
    "kernels_py.layout.transpose",
    "kernels_py.mhc.sinkhorn_normalize",
    "kernels_py.mhc.sinkhorn_normalize_backward",
    "kernels_py.mhc.expand_to_mhc",
    "kernels_py.mhc.expand_to_mhc_backward",
    "kernels_py.mhc.mhc_pre_apply_mix",
    "kernels_py.mhc.mhc_pre_apply_mix_backward",
    "kernels_py.mhc.mhc_post",
    "kernels_py.mhc.mhc_post_backward",
    "kernels_py.mhc.mhc_pre_split_mixes",
    "kernels_py.mhc.mhc_head_compute_mix",
    "kernels_py.mhc.mhc_pre_split_mixes_backward",
    "kernels_py.mhc.mhc_head_compute_mix_backward",
    "kernels_py.mhc.mhc_pre_norm_fn",
    "kernels_py.mhc.mhc_pre_norm_fn_backward",
    "kernels_py.quant.per_block_cast_fp8",
    "kernels_py.quant.per_block_cast_lossless",
    "kernels_py.quant.cast_back_fp8",
    "kernels_py.quant.per_token_cast_e5m6",
    "kernels_py.quant.cast_back_e5m6",
    "kernels_py.moe.moe_expand",
    "kernels_py.moe.expand_to_fused",
    "kernels_py.moe.expand_to_fused_with_sf",
    "kernels_py.moe.moe_reduce",
    "kernels_py.engram.engram_gate",
    "kernels_py.engram.engram_gate_save",
    "kernels_py.engram.engram_gate_backward",
    "kernels_py.engram.engram_hash",
    "kernels_py.engram.engram_fused_weight",
    "kernels_py.engram.engram_grad_w_reduce",
    "kernels_py.quant.per_token_cast_fp4",
    "kernels_py.quant.cast_back_fp4",
    "kernels_py.quant.per_channel_cast_fp8",
    "kernels_py.quant.per_channel_cast_fused",
    "kernels_py.quant.per_channel_cast_and_transpose",
)


def all_specs():
    """The KernelSpec of every op, in a stable order."""
    return [importlib.import_module(name).SPEC for name in OP_MODULES]
