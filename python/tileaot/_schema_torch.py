"""Torch custom ops of `schema_op` functions: ``torch.ops.<namespace>.<op>`` and ``<op>_out``.

For the packages `python -m build_tools wheel --kernels` builds (tileaot's own ops register
through `tileaot.torch_ops`). The functional op takes the function's arguments (input tensors,
then scalars) and returns new tensors; ``<op>_out`` takes the output tensors first, as ATen's
``at::<op>_out`` does, and returns nothing. Both run the function itself, so its checks, errors
and launches are those of an eager call; the fake (for ``torch.compile`` and ``torch.export``)
is the schema's (`OpSchema.fake`: shapes and dtypes from the inputs, symbolic sizes welcome).
Imports torch: nothing imports this module before the package's ``register_torch_ops()``.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from typing import Any

import torch

_TYPES = {"float32": "float", "float64": "float", "int32": "int", "int64": "int"}
_DEFS: dict[str, Any] = {}  # kept referenced: torch's registry holds op definitions weakly


def register(namespace: str, fns: Sequence[Callable[..., Any]]) -> tuple[str, ...]:
    """Register each function's two ops (once; later calls do nothing); returns their names."""
    if not _DEFS:
        defs = {}
        for fn in fns:
            defs[fn.schema.op] = _functional(namespace, fn)
            defs[fn.schema.op + "_out"] = _out(namespace, fn)
        _DEFS.update(defs)  # only once all are in: a failed attempt is retried next call
    return tuple(_DEFS)


def _names(schema: Any) -> list[str]:
    return [t.api for t in schema.inputs] + [n for n, _ in schema.scalars]


def _in_order(names: list[str], args: tuple, kwargs: dict) -> list[Any]:
    """A call's arguments in schema order (torch passes them as the caller did)."""
    given = {**dict(zip(names, args, strict=False)), **kwargs}
    return [given[n] for n in names]


def _args(schema: Any) -> str:
    tensors = [f"Tensor {t.api}" for t in schema.inputs]
    return ", ".join([*tensors, *(f"{_TYPES[c]} {n}" for n, c in schema.scalars)])


def _functional(namespace: str, fn: Callable[..., Any]) -> Any:
    schema = fn.schema
    names, tensors = _names(schema), [t.api for t in schema.inputs]
    single = len(schema.outs) == 1

    def impl(*args: Any, **kwargs: Any) -> Any:
        result = fn(*_in_order(names, args, kwargs))
        return result if single else tuple(result)

    def fake(*args: Any, **kwargs: Any) -> Any:
        values = _in_order(names, args, kwargs)
        outs = schema.fake(dict(zip(tensors, values, strict=False)), torch)
        return outs[0] if single else outs

    returns = "Tensor" if single else "(" + ", ".join(["Tensor"] * len(schema.outs)) + ")"
    op = torch.library.custom_op(
        f"{namespace}::{schema.op}", impl, mutates_args=(), schema=f"({_args(schema)}) -> {returns}"
    )
    op.register_fake(fake)
    return op


def _out(namespace: str, fn: Callable[..., Any]) -> Any:
    schema = fn.schema
    outs = [t.api for t in schema.outs]
    n = len(outs)
    mutable = ", ".join(
        f"Tensor({alias}!) {o}" for alias, o in zip(string.ascii_lowercase, outs, strict=False)
    )

    names = outs + _names(schema)

    def impl(*args: Any, **kwargs: Any) -> None:
        values = _in_order(names, args, kwargs)
        fn(*values[n:], out=values[0] if n == 1 else tuple(values[:n]))

    op = torch.library.custom_op(
        f"{namespace}::{schema.op}_out",
        impl,
        mutates_args=tuple(outs),
        schema=f"({mutable}, {_args(schema)}) -> ()",
    )
    op.register_fake(_nothing)
    return op


def _nothing(*args: Any) -> None:
    """The fake of every ``_out`` op: it writes into its arguments and returns nothing."""
