"""The eager `torch.autograd.Function`s of the differentiable ops: built from the schema's
backward pairing, one per op, on first use (torch is imported lazily)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from . import _validate

_FUNCTIONS: dict[str, Any] = {}  # op -> its torch.autograd.Function


def backward_op(schema: Any) -> Any:
    """The public function of `schema.backward` (imported by name: no import circle)."""
    return getattr(importlib.import_module(f"{__package__}.{schema.backward}"), schema.backward)


def dense(grad: Any) -> Any:
    """`grad` if contiguous and 16-byte aligned, else a contiguous copy: autograd hands over
    gradients in whatever layout it has (an ``expand``ed one has stride 0)."""
    if grad.is_contiguous() and grad.data_ptr() % _validate.ALIGN == 0:
        return grad
    import torch

    return grad.clone(memory_format=torch.contiguous_format)


def function(
    schema: Any,
    forward: Callable[..., Any],
    tensors: int,
    *,
    inputs: bool = True,
    scalars: tuple[int, ...] | None = None,
) -> Any:
    """The torch.autograd.Function of `schema`'s op (built once per op).

    ``apply(*args)`` runs ``forward(*args)``: the first `tensors` arguments are tensors, the rest
    scalars. Its backward calls the paired op as ``backward(grad, *args)`` (``inputs=False``:
    ``backward(grad)``, for an op whose gradient needs none of its inputs; nothing is saved) and
    returns one gradient per tensor argument (None where autograd needs none), None per scalar.
    `scalars`: the positions among the scalar arguments that the backward takes (default: all).
    A forward returning several tensors gets their gradients first: ``backward(*grads, *args)``.
    """
    fn = _FUNCTIONS.get(schema.op)
    if fn is None:
        fn = _FUNCTIONS[schema.op] = _build(schema, forward, tensors, inputs, scalars)
    return fn


def _build(
    schema: Any,
    forward: Callable[..., Any],
    tensors: int,
    inputs: bool,
    scalars: tuple[int, ...] | None,
) -> Any:
    import torch
    from torch.autograd.function import once_differentiable

    backward = backward_op(schema)

    @staticmethod
    def fwd(ctx, *args):
        if inputs:
            ctx.save_for_backward(*args[:tensors])
            rest = args[tensors:]
            ctx.scalars = rest if scalars is None else tuple(rest[i] for i in scalars)
        ctx.n_scalars = len(args) - tensors
        return forward(*args)

    @staticmethod
    @once_differentiable
    def bwd(ctx, *grad):
        saved = (*ctx.saved_tensors, *ctx.scalars) if inputs else ()
        grads = backward(*(dense(g) for g in grad), *saved)
        grads = grads if isinstance(grads, tuple) else (grads,)
        needed = zip(grads, ctx.needs_input_grad[:tensors], strict=True)
        return (*(g if need else None for g, need in needed), *(None,) * ctx.n_scalars)

    name = "".join(part.title() for part in schema.op.split("_"))
    return type(name, (torch.autograd.Function,), {"forward": fwd, "backward": bwd})
