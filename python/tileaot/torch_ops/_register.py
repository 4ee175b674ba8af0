"""Turn each `OpSpec` into two torch custom ops: functional ``<op>`` and mutating ``<op>_out``."""

from __future__ import annotations

import string
import threading
from collections.abc import Callable
from typing import Any

import torch

from .._validate import dense as _dense  # contiguous, then a copy only if misaligned
from ._autograd import register_autograd
from ._specs import SPECS, OpSpec
from ._substitute import substitute_wrappers

NAMESPACE = "tileaot"
# The op definitions, kept referenced: torch's own registry of them (custom_ops.OPDEFS) holds them
# weakly, and finding an op's definition by name (opcheck, autograd) needs it alive.
_DEFS: dict[str, Any] = {}
_LOCK = threading.Lock()


def register() -> None:
    """Register every op as ``torch.ops.tileaot.<op>`` and ``<op>_out``; later calls do nothing."""
    with _LOCK:
        if _DEFS:
            return
        if not hasattr(torch.library, "custom_op"):
            raise ImportError(
                f"tileaot's torch ops need torch >= 2.4 (torch.library.custom_op); this is torch "
                f"{torch.__version__}: upgrade torch, or call the tileaot functions eagerly"
            )
        defs = {}
        for spec in SPECS:
            defs[spec.name] = _functional_op(spec)
            defs[spec.name + "_out"] = _out_op(spec)
        register_autograd(defs)
        _DEFS.update(defs)  # only once every op is in: a failed attempt is retried next call
        substitute_wrappers(SPECS)  # needs the ops; warns (once, here) for any it cannot do


def op_names() -> tuple[str, ...]:
    """Names under ``torch.ops.tileaot`` (functional ops and their ``_out`` variants)."""
    return tuple(_DEFS)


def _functional_op(spec: OpSpec) -> Any:
    bind = _binder(spec.args)
    fn, fake, fixed, dense = spec.fn, spec.fake, spec.fixed, spec.dense
    several = len(spec.outs) > 1

    def impl(*args: Any, **kwargs: Any) -> Any:
        result = fn(**_densified(bind(args, kwargs), dense), **fixed)
        return tuple(result) if several else result  # a NamedTuple becomes a plain tuple

    def fake_impl(*args: Any, **kwargs: Any) -> Any:
        return fake(*bind(args, kwargs).values())

    op = torch.library.custom_op(
        f"{NAMESPACE}::{spec.name}",
        impl,
        mutates_args=(),
        schema=f"({spec.args}) -> {_returns(spec.outs)}",
    )
    op.register_fake(fake_impl)
    return op


def _out_op(spec: OpSpec) -> Any:
    out_names = tuple(o.rstrip("?") for o in spec.outs)
    args = f"{_mutable_args(spec.outs)}, {spec.args}"
    bind = _binder(args)
    fn, fixed, dense = spec.fn, spec.fixed, spec.dense

    def impl(*args: Any, **kwargs: Any) -> None:
        kwargs = bind(args, kwargs)
        # Optional outputs left None are dropped: the wrapper takes the shorter tuple then.
        outs = [o for o in (kwargs.pop(name) for name in out_names) if o is not None]
        out = outs[0] if len(out_names) == 1 else tuple(outs)
        fn(**_densified(kwargs, dense), **fixed, out=out)

    op = torch.library.custom_op(
        f"{NAMESPACE}::{spec.name}_out", impl, mutates_args=out_names, schema=f"({args}) -> ()"
    )
    op.register_fake(_no_outputs)
    return op


def _no_outputs(*args: Any, **kwargs: Any) -> None:
    """The fake of every ``_out`` op: it writes into its arguments and returns nothing."""


def _binder(args: str) -> Callable[[tuple, dict], dict[str, Any]]:
    """A function mapping a call's (args, kwargs) to every schema argument, in schema order.

    torch hands a Python kernel the arguments as the caller passed them: trailing defaults left
    out. The wrappers share the schema's defaults, but the fakes take every argument.
    """
    schema = torch._C.parse_schema(f"f({args}) -> ()")
    names = tuple(a.name for a in schema.arguments)
    defaults = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}

    def bind(args: tuple, kwargs: dict) -> dict[str, Any]:
        given = {**defaults, **dict(zip(names, args, strict=False)), **kwargs}
        return {name: given[name] for name in names}  # in schema order

    return bind


def _densified(kwargs: dict[str, Any], dense: tuple[str, ...]) -> dict[str, Any]:
    for name in dense:
        kwargs[name] = _dense(kwargs[name])
    return kwargs


def _returns(outs: tuple[str, ...]) -> str:
    types = ["Tensor?" if o.endswith("?") else "Tensor" for o in outs]
    return types[0] if len(types) == 1 else f"({', '.join(types)})"


def _mutable_args(outs: tuple[str, ...]) -> str:
    """``Tensor(a!) q, Tensor(b!)? s``: each output its own alias set, optional ones nullable."""
    return ", ".join(
        f"Tensor({alias}!){'?' if o.endswith('?') else ''} {o.rstrip('?')}"
        for alias, o in zip(string.ascii_lowercase, outs, strict=False)
    )
