"""What each op looks like to torch: its schema arguments, outputs and fake implementation.

The schema arguments are the public function's parameters (same names, order and defaults, less
``out`` and ``return_gate``; a CPU test holds them equal), so the custom op forwards its arguments
by name. A fake implementation returns empty tensors with the shapes and dtypes the wrapper would
allocate for valid arguments (CPU tests compare the two on several shapes); it runs on fake or
meta tensors whose sizes may be symbolic, so it only does arithmetic on sizes and never checks
(the wrapper checks at run time, before any launch).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import torch

from .._schema_torch import OpSpec, schema_fake
from ..aux_fi import aux_fi
from ..cast_back import cast_back
from ..cast_back_e5m6 import cast_back_e5m6
from ..engram_fused_weight import engram_fused_weight
from ..engram_gate import engram_gate
from ..engram_gate_backward import engram_gate_backward
from ..engram_grad_w_reduce import engram_grad_w_reduce
from ..engram_hash import engram_hash
from ..expand_to_fused import expand_to_fused
from ..expand_to_fused_with_sf import expand_to_fused_with_sf
from ..expand_to_mhc import expand_to_mhc
from ..expand_to_mhc_backward import expand_to_mhc_backward
from ..gemm import gemm
from ..group_count import group_count
from ..inplace_unique_group_indices import inplace_unique_group_indices
from ..mask_indices_by_tp import mask_indices_by_tp
from ..mhc_head_compute_mix import mhc_head_compute_mix
from ..mhc_head_compute_mix_backward import mhc_head_compute_mix_backward
from ..mhc_post import mhc_post
from ..mhc_post_backward import mhc_post_backward
from ..mhc_pre_apply_mix import mhc_pre_apply_mix
from ..mhc_pre_apply_mix_backward import mhc_pre_apply_mix_backward
from ..mhc_pre_norm_fn import mhc_pre_norm_fn
from ..mhc_pre_norm_fn_backward import mhc_pre_norm_fn_backward
from ..mhc_pre_split_mixes import mhc_pre_split_mixes
from ..mhc_pre_split_mixes_backward import mhc_pre_split_mixes_backward
from ..moe_expand import moe_expand
from ..moe_reduce import moe_reduce
from ..normalize_weight import normalize_weight
from ..per_block_cast_fp8 import per_block_cast_fp8
from ..per_block_cast_lossless import per_block_cast_lossless
from ..per_channel_cast_and_transpose import per_channel_cast_and_transpose
from ..per_channel_cast_fp8 import per_channel_cast_fp8
from ..per_channel_cast_fused import per_channel_cast_fused
from ..per_token_cast_e5m6 import per_token_cast_e5m6
from ..per_token_cast_fp4 import per_token_cast_fp4
from ..per_token_cast_fp8 import per_token_cast_fp8
from ..rms_norm import rms_norm
from ..sinkhorn_normalize import sinkhorn_normalize
from ..sinkhorn_normalize_backward import sinkhorn_normalize_backward
from ..swiglu import swiglu
from ..swiglu_backward import swiglu_backward
from ..swiglu_per_channel_cast_and_transpose import swiglu_per_channel_cast_and_transpose
from ..swiglu_per_token_cast_fp8 import swiglu_per_token_cast_fp8
from ..top2_sum_gate import top2_sum_gate
from ..topk_gate import topk_gate
from ..topk_sum_and_topk_group_idx import topk_sum_and_topk_group_idx
from ..transpose import transpose

# Annotations of the public functions -> torch schema types (`from __future__ import
# annotations` keeps them as the text written in the def).
_TYPES = {
    "torch.Tensor": "Tensor",
    "torch.Tensor | None": "Tensor?",
    "float": "float",
    "float | None": "float?",
    "int": "int",
    "int | None": "int?",
    "str": "str",
    "str | None": "str?",
    "bool": "bool",
    "torch.dtype | None": "ScalarType?",
}


def _schema_args(fn: Callable[..., Any], fixed: Mapping[str, Any]) -> str:
    """The torch schema arguments of public function `fn`: its parameters in order (keyword-only
    ones too: the custom op forwards by name), their annotated types and defaults; not ``out``
    nor the `fixed` ones."""
    args = []
    for p in inspect.signature(fn).parameters.values():
        if p.name == "out" or p.name in fixed or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        text = f"{_TYPES[p.annotation]} {p.name}"
        if p.default is not p.empty:
            text += f"={p.default!r}"
        args.append(text)
    return ", ".join(args)


def _from_schema(fn: Callable[..., Any], **extra: Any) -> OpSpec:
    """The `OpSpec` of public function `fn` whose module has a `SCHEMA` (tileaot/_schema.py):
    arguments from the function, outputs and fake from the schema."""
    schema = sys.modules[fn.__module__].SCHEMA
    fixed = extra.get("fixed", {})
    return OpSpec(
        fn, _schema_args(fn, fixed), schema.torch_outs(), schema_fake(schema, fn), **extra
    )


def _engram_gate_backward(grad_out, h, k, v, w_h, w_k, eps, saved, clamp_value):
    grads = tuple(torch.empty_like(x) for x in (h, h, v))  # grad_v: v's shape (maybe shared)
    return (*grads, *(torch.empty_like(w, dtype=torch.float32) for w in (w_h, w_k)))


_GRAD = ("grad_out",)
SPECS: tuple[OpSpec, ...] = (
    _from_schema(rms_norm),
    _from_schema(gemm),
    _from_schema(per_token_cast_fp8),
    _from_schema(per_token_cast_fp4),
    _from_schema(per_token_cast_e5m6),
    _from_schema(per_block_cast_fp8),
    _from_schema(per_block_cast_lossless),
    _from_schema(per_channel_cast_fp8),
    _from_schema(per_channel_cast_fused),
    _from_schema(per_channel_cast_and_transpose),
    _from_schema(cast_back),
    _from_schema(cast_back_e5m6),
    _from_schema(topk_gate),
    _from_schema(top2_sum_gate),
    _from_schema(topk_sum_and_topk_group_idx),
    _from_schema(normalize_weight),
    _from_schema(mask_indices_by_tp),
    _from_schema(group_count),
    _from_schema(aux_fi),
    _from_schema(inplace_unique_group_indices),
    _from_schema(swiglu),
    _from_schema(swiglu_per_token_cast_fp8),
    _from_schema(swiglu_per_channel_cast_and_transpose),
    _from_schema(swiglu_backward),
    _from_schema(transpose),
    _from_schema(sinkhorn_normalize),
    _from_schema(sinkhorn_normalize_backward, dense=_GRAD),
    _from_schema(expand_to_mhc),
    _from_schema(expand_to_mhc_backward, dense=_GRAD),
    _from_schema(mhc_pre_apply_mix),
    _from_schema(mhc_pre_apply_mix_backward, dense=_GRAD),
    _from_schema(mhc_post),
    _from_schema(mhc_post_backward, dense=_GRAD),
    _from_schema(mhc_pre_split_mixes),
    _from_schema(mhc_head_compute_mix),
    _from_schema(
        mhc_pre_split_mixes_backward,
        dense=("pre_layer_mix_grad", "post_layer_mix_grad", "comb_res_mix_grad"),
    ),
    _from_schema(mhc_head_compute_mix_backward, dense=("output_mix_grad",)),
    # mhc_fn comes as [N, R * H] too (TileKernels' layout), which the schema's fake would not
    # bind: the fake takes N from mhc_fn's first dim and the leading dims from residual.
    OpSpec(
        mhc_pre_norm_fn,
        _schema_args(mhc_pre_norm_fn, {}),
        ("out",),
        lambda residual, mhc_fn, *_: residual.new_empty(
            (*residual.shape[:-2], mhc_fn.shape[0]), dtype=torch.float32
        ),
    ),
    OpSpec(  # the gradients in the shapes of residual and mhc_fn (either layout)
        mhc_pre_norm_fn_backward,
        _schema_args(mhc_pre_norm_fn_backward, {}),
        ("residual_grad", "mhc_fn_grad"),
        lambda out_grad, residual, mhc_fn, *_: (
            torch.empty_like(residual, memory_format=torch.contiguous_format),
            torch.empty_like(mhc_fn, dtype=torch.float32, memory_format=torch.contiguous_format),
        ),
        dense=("out_grad",),
    ),
    _from_schema(moe_expand),
    _from_schema(expand_to_fused),
    _from_schema(expand_to_fused_with_sf),
    _from_schema(moe_reduce),
    _from_schema(engram_hash),
    _from_schema(engram_fused_weight),
    _from_schema(engram_grad_w_reduce),
    # (out, g); the backward op takes the statistics from the saving forward (saved=None).
    _from_schema(
        engram_gate, fixed=MappingProxyType({"return_gate": True, "save_for_backward": False})
    ),
    OpSpec(
        engram_gate_backward,
        "Tensor grad_out, Tensor h, Tensor k, Tensor v, Tensor w_h, Tensor w_k, float eps=1e-06, "
        "Tensor[]? saved=None, float clamp_value=1e-06",
        sys.modules[engram_gate_backward.__module__].SCHEMA.torch_outs(),
        _engram_gate_backward,
        dense=_GRAD,
    ),
)
