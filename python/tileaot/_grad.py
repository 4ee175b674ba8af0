"""What the eager `torch.autograd.Function`s of the differentiable ops share: the backward op a
schema pairs with its forward, and gradients made dense for it."""

from __future__ import annotations

import importlib
from typing import Any

from . import _validate


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
