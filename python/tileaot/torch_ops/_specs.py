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
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from ..cast_back import cast_back
from ..engram_gate import engram_gate
from ..engram_gate_backward import engram_gate_backward
from ..expand_to_mhc import expand_to_mhc
from ..expand_to_mhc_backward import expand_to_mhc_backward
from ..gemm import gemm
from ..mhc_post import mhc_post
from ..mhc_post_backward import mhc_post_backward
from ..mhc_pre_apply_mix import mhc_pre_apply_mix
from ..mhc_pre_apply_mix_backward import mhc_pre_apply_mix_backward
from ..moe_expand import moe_expand
from ..moe_reduce import moe_reduce
from ..per_block_cast_fp8 import per_block_cast_fp8
from ..per_token_cast_fp4 import per_token_cast_fp4
from ..per_token_cast_fp8 import per_token_cast_fp8
from ..rms_norm import rms_norm
from ..sinkhorn_normalize import sinkhorn_normalize
from ..sinkhorn_normalize_backward import sinkhorn_normalize_backward
from ..swiglu import swiglu
from ..swiglu_per_token_cast_fp8 import swiglu_per_token_cast_fp8
from ..top2_sum_gate import top2_sum_gate
from ..topk_gate import topk_gate
from ..transpose import transpose


@dataclass(frozen=True)
class OpSpec:
    fn: Callable[..., Any]  # the public function; the torch op takes its name
    args: str  # schema arguments, e.g. "Tensor x, Tensor weight, float eps=1e-06"
    outs: tuple[str, ...]  # output names (the `_out` op's arguments); "name?" may be None
    fake: Callable[..., Any]  # (*args) -> the outputs' empty stand-ins
    fixed: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    dense: tuple[str, ...] = ()  # arguments made contiguous and aligned first (gradients)

    @property
    def name(self) -> str:
        return self.fn.__name__


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
    params = inspect.signature(fn).parameters.values()
    defaults = {p.name: p.default for p in params if p.default is not p.empty}
    names = [p.name for p in params]

    def fake(*args: Any) -> Any:
        given = {**defaults, **dict(zip(names, args, strict=False))}
        serving, key = schema, None
        if schema.key_of is not None:  # the key picks sizes/dtypes (or the schema) of the outputs
            key = schema.key_of(given)
            if isinstance(key, tuple):
                serving, key = key
        tensors = {t.api: given.get(t.api) for t in serving.inputs}
        outs = serving.fake(tensors, torch, key, given)
        return outs[0] if len(outs) == 1 else outs

    fixed = extra.get("fixed", {})
    return OpSpec(fn, _schema_args(fn, fixed), schema.torch_outs(), fake, **extra)


def _engram_gate(h, k, v, w_h, w_k, eps):
    return torch.empty_like(h), h.new_empty(h.shape[:-1], dtype=torch.float32)


def _engram_gate_backward(grad_out, h, k, v, w_h, w_k, eps, g):
    like = (h, h, v, w_h, w_k)  # grad_v has v's shape (a shared v: [..., 1, H])
    return tuple(torch.empty_like(x) for x in like)


_GRAD = ("grad_out",)
SPECS: tuple[OpSpec, ...] = (
    _from_schema(rms_norm),
    _from_schema(gemm),
    _from_schema(per_token_cast_fp8),
    _from_schema(per_token_cast_fp4),
    _from_schema(per_block_cast_fp8),
    _from_schema(cast_back),
    _from_schema(topk_gate),
    _from_schema(top2_sum_gate),
    _from_schema(swiglu),
    _from_schema(swiglu_per_token_cast_fp8),
    _from_schema(transpose),
    _from_schema(sinkhorn_normalize),
    _from_schema(sinkhorn_normalize_backward, dense=_GRAD),
    _from_schema(expand_to_mhc),
    _from_schema(expand_to_mhc_backward, dense=_GRAD),
    _from_schema(mhc_pre_apply_mix),
    _from_schema(mhc_pre_apply_mix_backward, dense=_GRAD),
    _from_schema(mhc_post),
    _from_schema(mhc_post_backward, dense=_GRAD),
    _from_schema(moe_expand),
    _from_schema(moe_reduce),
    OpSpec(
        engram_gate,
        "Tensor h, Tensor k, Tensor v, Tensor w_h, Tensor w_k, float eps=1e-06",
        ("out", "gate"),
        _engram_gate,
        fixed=MappingProxyType({"return_gate": True}),
    ),
    OpSpec(
        engram_gate_backward,
        "Tensor grad_out, Tensor h, Tensor k, Tensor v, Tensor w_h, Tensor w_k, float eps=1e-06, "
        "Tensor? g=None",
        ("grad_h", "grad_k", "grad_v", "grad_w_h", "grad_w_k"),
        _engram_gate_backward,
        dense=_GRAD,
    ),
)
