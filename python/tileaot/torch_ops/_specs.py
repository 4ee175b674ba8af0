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
from ..gemm import gemm
from ..moe_expand import GROUP as MOE_GROUP
from ..moe_expand import moe_expand
from ..moe_reduce import moe_reduce
from ..per_block_cast_fp8 import BLOCK, per_block_cast_fp8
from ..per_token_cast_fp4 import per_token_cast_fp4
from ..per_token_cast_fp8 import GROUP as TOKEN_GROUP
from ..per_token_cast_fp8 import per_token_cast_fp8
from ..rms_norm import rms_norm
from ..sinkhorn_normalize import sinkhorn_normalize
from ..sinkhorn_normalize_backward import sinkhorn_normalize_backward
from ..swiglu import swiglu
from ..swiglu_per_token_cast_fp8 import GROUP as SWIGLU_GROUP
from ..swiglu_per_token_cast_fp8 import swiglu_per_token_cast_fp8
from ..topk_gate import topk_gate
from ..transpose import transpose

FP8 = torch.float8_e4m3fn


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


def _schema_args(fn: Callable[..., Any]) -> str:
    """The torch schema arguments of public function `fn`: its positional parameters, their
    annotated types and defaults (keyword-only ones, ``out`` and the like, are not arguments)."""
    args = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind is not p.POSITIONAL_OR_KEYWORD:
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
    names = [p.name for p in inspect.signature(fn).parameters.values()]
    tensors = {t.api for t in schema.inputs}

    def fake(*args: Any) -> Any:
        given = dict(zip(names, args, strict=False))
        outs = schema.fake({n: v for n, v in given.items() if n in tensors}, torch)
        return outs[0] if len(outs) == 1 else outs

    return OpSpec(fn, _schema_args(fn), schema.torch_outs(), fake, **extra)


def _like(x: torch.Tensor, *_: Any) -> torch.Tensor:
    return torch.empty_like(x)


def _quantised(x: torch.Tensor, q_shape, scale_shape, scale_dtype=torch.float32):
    return x.new_empty(q_shape, dtype=FP8), x.new_empty(scale_shape, dtype=scale_dtype)


def _per_token_cast_fp8(x, group_size, round_sf):
    m, n = x.shape
    groups = n // TOKEN_GROUP if group_size == TOKEN_GROUP else 1
    return _quantised(x, (m, n), (m, groups))


def _per_token_cast_fp4(x, group_size, scale_format):
    *rows, n = x.shape
    scale_dtype = torch.uint8 if scale_format == "ue8m0" else FP8
    q = x.new_empty((*rows, n // 2), dtype=torch.uint8)  # two E2M1 codes per byte
    return q, x.new_empty((*rows, n // group_size), dtype=scale_dtype)


def _per_block_cast_fp8(x, round_sf):
    m, n = x.shape
    return _quantised(x, (m, n), ((m + BLOCK - 1) // BLOCK, (n + BLOCK - 1) // BLOCK))


def _cast_back(q, scale, layout, group_size, out_dtype):
    shape = q.shape
    if q.dtype == torch.uint8:  # packed FP4: two values per byte
        shape = (*shape[:-1], 2 * shape[-1])
    return q.new_empty(shape, dtype=torch.bfloat16 if out_dtype is None else out_dtype)


def _topk_gate(scores, k, scoring, renormalize):
    t = scores.shape[0]
    return scores.new_empty(t, k, dtype=torch.int32), scores.new_empty(t, k)


def _swiglu_per_token_cast_fp8(x, weights, clamp, round_sf):
    m, h = x.shape[0], x.shape[1] // 2
    return _quantised(x, (m, h), (m, h // SWIGLU_GROUP))


def _transpose(x):
    return x.new_empty((*x.shape[:-2], x.shape[-1], x.shape[-2]))


def _sinkhorn_normalize_backward(grad_out, logits, repeat, eps):
    return torch.empty_like(logits)


def _moe_expand(x, idx, num_experts, alignment, x_scale):
    (t, h), k = x.shape, idx.shape[1]
    rows = t * k + num_experts * (alignment - 1)  # every routing fits: no data-dependent size
    scale = None if x_scale is None else x.new_empty(rows, h // MOE_GROUP, dtype=torch.float32)
    offsets = x.new_empty(num_experts + 1, dtype=torch.int32)
    return x.new_empty(rows, h), offsets, x.new_empty(t, k, dtype=torch.int32), scale


def _moe_reduce(y_sorted, token_pos, weights, out_dtype):
    t, h = token_pos.shape[0], y_sorted.shape[1]
    return y_sorted.new_empty(t, h, dtype=y_sorted.dtype if out_dtype is None else out_dtype)


def _engram_gate_backward(grad_out, h, k, v, w_h, w_k, eps, g, clamp_value):
    like = (h, h, v, w_h, w_k)  # grad_v has v's shape (a shared v: [..., 1, H])
    return tuple(torch.empty_like(x) for x in like)


_GRAD = ("grad_out",)
SPECS: tuple[OpSpec, ...] = (
    _from_schema(rms_norm),
    _from_schema(gemm),
    OpSpec(
        per_token_cast_fp8,
        "Tensor x, int? group_size=128, bool round_sf=False",
        ("q", "scale"),
        _per_token_cast_fp8,
    ),
    OpSpec(
        per_token_cast_fp4,
        "Tensor x, int group_size=32, str scale_format='ue8m0'",
        ("q", "scale"),
        _per_token_cast_fp4,
    ),
    OpSpec(
        per_block_cast_fp8, "Tensor x, bool round_sf=False", ("q", "scale"), _per_block_cast_fp8
    ),
    OpSpec(
        cast_back,
        "Tensor q, Tensor scale, str? layout=None, int? group_size=None, "
        "ScalarType? out_dtype=None",
        ("out",),
        _cast_back,
    ),
    OpSpec(
        topk_gate,
        "Tensor scores, int k, str scoring='softmax', bool renormalize=True",
        ("idx", "weights"),
        _topk_gate,
    ),
    _from_schema(swiglu),
    OpSpec(
        swiglu_per_token_cast_fp8,
        "Tensor x, Tensor? weights=None, float? clamp=None, bool round_sf=False",
        ("q", "scale"),
        _swiglu_per_token_cast_fp8,
    ),
    OpSpec(transpose, "Tensor x", ("out",), _transpose),
    OpSpec(sinkhorn_normalize, "Tensor logits, int repeat=10, float eps=1e-06", ("out",), _like),
    OpSpec(
        sinkhorn_normalize_backward,
        "Tensor grad_out, Tensor logits, int repeat=10, float eps=1e-06",
        ("out",),
        _sinkhorn_normalize_backward,
        dense=_GRAD,
    ),
    OpSpec(
        moe_expand,
        "Tensor x, Tensor idx, int num_experts, int alignment=16, Tensor? x_scale=None",
        ("x_sorted", "expert_offsets", "token_pos", "x_sorted_scale?"),
        _moe_expand,
    ),
    OpSpec(
        moe_reduce,
        "Tensor y_sorted, Tensor token_pos, Tensor? weights=None, ScalarType? out_dtype=None",
        ("out",),
        _moe_reduce,
    ),
    _from_schema(engram_gate, fixed=MappingProxyType({"return_gate": True})),
    OpSpec(
        engram_gate_backward,
        "Tensor grad_out, Tensor h, Tensor k, Tensor v, Tensor w_h, Tensor w_k, float eps=1e-06, "
        "Tensor? g=None, float clamp_value=1e-06",
        ("grad_h", "grad_k", "grad_v", "grad_w_h", "grad_w_k"),
        _engram_gate_backward,
        dense=_GRAD,
    ),
)
