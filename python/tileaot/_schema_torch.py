"""Torch custom ops of `schema_op` functions: ``torch.ops.<namespace>.<op>`` and ``<op>_out``.

For the packages `python -m build_tools wheel --kernels` builds (tileaot's own ops register
through `tileaot.torch_ops`). The functional op takes the function's arguments (input tensors,
then scalars) and returns new tensors; ``<op>_out`` takes the output tensors first, as ATen's
``at::<op>_out`` does, and returns nothing; inside ``torch.compile`` a call of the function is
traced as the op. Both run the function itself, so its checks, errors and launches are those of
an eager call; the fake (for ``torch.compile`` and ``torch.export``) is the schema's
(`OpSchema.fake`: shapes and dtypes from the inputs, symbolic sizes welcome).
Imports torch: nothing imports this module before the package's ``register_torch_ops()``.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from typing import Any

import torch

_TYPES = {"float32": "float", "float64": "float", "int32": "int", "int64": "int"}
# namespace -> op name -> definition, kept referenced: torch's registry holds them weakly.
_DEFS: dict[str, dict[str, Any]] = {}


def register(namespace: str, fns: Sequence[Callable[..., Any]]) -> tuple[str, ...]:
    """Register each function's two ops under `namespace` (once; later calls do nothing);
    returns their names."""
    if namespace not in _DEFS:
        defs = {}
        for fn in fns:
            defs[fn.schema.op] = _functional(namespace, fn)
            defs[fn.schema.op + "_out"] = _out(namespace, fn)
        _DEFS[namespace] = defs  # only once all are in: a failed attempt is retried next call
        _substitute(namespace, fns)
    return tuple(_DEFS[namespace])


def _substitute(namespace: str, fns: Sequence[Callable[..., Any]]) -> None:
    """Let ``torch.compile`` trace a call of each function as its op (torch >= 2.5; as
    tileaot.torch_ops._substitute does for tileaot's): the function itself reads data pointers,
    which would break the graph. Without it, compiled code calls torch.ops.<namespace>.<op>."""
    substitute = getattr(torch.compiler, "substitute_in_graph", None)
    if substitute is None:
        return
    ops = getattr(torch.ops, namespace)
    for fn in fns:
        substitute(fn)(
            _stand_in(fn, getattr(ops, fn.schema.op), getattr(ops, fn.schema.op + "_out"))
        )


def _stand_in(fn: Callable[..., Any], op: Any, out_op: Any) -> Callable[..., Any]:
    # Only plain values in the closure: Dynamo inlines `stand_in` and must wrap each of them.
    names, several = tuple(_names(fn.schema)), len(fn.schema.outs) > 1

    def stand_in(*args: Any, **kwargs: Any) -> Any:  # (*args, **kwargs): Dynamo's wildcard
        out = kwargs.pop("out", None)
        values = _in_order(list(names), args, kwargs)
        if out is None:
            return op(*values)
        out_op(*(tuple(out) if several else (out,)), *values)
        return out

    return stand_in


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
