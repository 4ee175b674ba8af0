"""Backward formulas of the differentiable ops, in terms of the backward custom ops.

All are traceable (no ``data_ptr``, no launch): under ``torch.compile`` AOTAutograd traces them
into the backward graph, where the backward op is one opaque node like the forward. The eager
`torch.autograd.Function`s in ``tileaot.sinkhorn_normalize``, ``tileaot.engram_gate`` and the
mHC ops do the same for plain wrapper calls; the custom ops cannot reuse them (a custom op's
forward must be the op).
"""

from __future__ import annotations

from typing import Any

import torch

from ..expand_to_mhc import SCHEMA as _EXPAND
from ..mhc_post import SCHEMA as _POST
from ..mhc_pre_apply_mix import SCHEMA as _PRE_APPLY_MIX
from ..mhc_pre_norm_fn import SCHEMA as _PRE_NORM_FN
from ..sinkhorn_normalize import SCHEMA as _SINKHORN


def register_autograd(defs: dict[str, Any]) -> None:
    defs["sinkhorn_normalize"].register_autograd(
        _sinkhorn_normalize_backward, setup_context=_sinkhorn_normalize_setup
    )
    defs["engram_gate"].register_autograd(_engram_gate_backward, setup_context=_engram_gate_setup)
    defs["expand_to_mhc"].register_autograd(_expand_to_mhc_backward)
    defs["mhc_pre_apply_mix"].register_autograd(
        _mhc_pre_apply_mix_backward, setup_context=_save_inputs
    )
    defs["mhc_post"].register_autograd(_mhc_post_backward, setup_context=_save_inputs)
    defs["mhc_pre_norm_fn"].register_autograd(
        _mhc_pre_norm_fn_backward, setup_context=_mhc_pre_norm_fn_setup
    )


def _sinkhorn_normalize_setup(ctx: Any, inputs: tuple, output: Any) -> None:
    logits, ctx.repeat, ctx.eps = inputs
    ctx.save_for_backward(logits)  # the backward kernel recomputes the forward from logits


def _sinkhorn_normalize_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    (logits,) = ctx.saved_tensors
    backward = getattr(torch.ops.tileaot, _SINKHORN.backward)  # the schema's pairing
    grad_logits = backward(grad, logits, ctx.repeat, ctx.eps)
    return grad_logits, None, None


def _expand_to_mhc_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    grad_hidden = getattr(torch.ops.tileaot, _EXPAND.backward)(grad)  # nothing saved
    return grad_hidden, None


def _save_inputs(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.save_for_backward(*inputs)


def _mhc_pre_apply_mix_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    backward = getattr(torch.ops.tileaot, _PRE_APPLY_MIX.backward)
    grad_x, grad_mix = backward(grad, *ctx.saved_tensors)
    need = ctx.needs_input_grad
    return (grad_x if need[0] else None), (grad_mix if need[1] else None)


def _mhc_post_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    grads = getattr(torch.ops.tileaot, _POST.backward)(grad, *ctx.saved_tensors)
    return tuple(g if need else None for g, need in zip(grads, ctx.needs_input_grad, strict=True))


def _mhc_pre_norm_fn_setup(ctx: Any, inputs: tuple, output: Any) -> None:
    residual, mhc_fn, weight, ctx.eps = inputs
    ctx.save_for_backward(residual, mhc_fn, weight)  # the backward recomputes the dots


def _mhc_pre_norm_fn_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    residual, mhc_fn, weight = ctx.saved_tensors
    n = mhc_fn.shape[0]
    fn = mhc_fn if weight is None else (mhc_fn.reshape(n, -1) * weight).view(mhc_fn.shape)
    backward = getattr(torch.ops.tileaot, _PRE_NORM_FN.backward)
    grad_x, grad_fn = backward(grad, residual, fn, ctx.eps)
    grad_w = None
    if weight is not None:  # fn = mhc_fn * weight, column by column
        grad_w = (grad_fn.reshape(n, -1) * mhc_fn.reshape(n, -1)).sum(0)
        grad_fn = (grad_fn.reshape(n, -1) * weight).view(mhc_fn.shape)
    need = ctx.needs_input_grad
    return (grad_x if need[0] else None), (grad_fn if need[1] else None), grad_w, None


def _engram_gate_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    *tensors, ctx.eps, ctx.clamp = inputs
    ctx.save_for_backward(*tensors)
    ctx.mark_non_differentiable(output[1])  # the gate is returned for inspection only


def _engram_gate_backward(ctx: Any, grad_out: torch.Tensor, grad_gate: Any) -> tuple:
    grads = torch.ops.tileaot.engram_gate_backward(
        grad_out, *ctx.saved_tensors, ctx.eps, clamp_value=ctx.clamp
    )
    need = ctx.needs_input_grad
    return (*(g if need[i] else None for i, g in enumerate(grads)), None, None)
