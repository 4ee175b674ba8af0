"""Torch custom ops of public op functions: ``torch.ops.<namespace>.<op>`` and ``<op>_out``.

Op-agnostic (it imports no op): `tileaot.torch_ops` registers tileaot's own ops through it, and
the packages `python -m build_tools wheel --kernels` builds ship it (with what it imports) to
register theirs. The functional op takes the function's arguments and returns new tensors;
``<op>_out`` takes the output tensors first, as ATen's ``at::<op>_out`` does, and returns nothing;
inside ``torch.compile`` a call of the function is traced as the op
(``torch.compiler.substitute_in_graph``, torch >= 2.5). Both ops run the function itself, so
checks, errors and launches are those of an eager call; the fake (for ``torch.compile`` and
``torch.export``) gives shapes and dtypes only, symbolic sizes welcome.
Imports torch: nothing imports this module before a ``register_torch_ops()``.
"""

from __future__ import annotations

import inspect
import string
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from ._validate import dense as _dense  # contiguous, then a copy only if misaligned


@dataclass(frozen=True)
class OpSpec:
    """What an op looks like to torch."""

    fn: Callable[..., Any]  # the public function; the torch op takes its name
    args: str  # schema arguments, e.g. "Tensor x, Tensor weight, float eps=1e-06"
    outs: tuple[str, ...]  # output names (the `_out` op's arguments); "name?" may be None
    fake: Callable[..., Any]  # (*args) -> the outputs' empty stand-ins
    fixed: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    dense: tuple[str, ...] = ()  # arguments made contiguous and aligned first (gradients)

    @property
    def name(self) -> str:
        return self.fn.__name__


# An adapter of the stand-in: (out=, number of outputs, the call's arguments) -> the `_out` op's
# output tensors; and (the op's result, the call's arguments) -> what the function returns.
OutsOf = Callable[[Any, int, dict], tuple]
ResultOf = Callable[[Any, dict], Any]

# namespace -> op name -> definition, kept referenced: torch's own registry of them
# (custom_ops.OPDEFS) holds them weakly, and finding an op's definition by name (opcheck,
# autograd) needs it alive.
_DEFS: dict[str, dict[str, Any]] = {}
_LOCK = threading.Lock()
_KERNEL_TYPES = {"float32": "float", "float64": "float", "int32": "int", "int64": "int"}


def register(namespace: str, fns: Sequence[Callable[..., Any]]) -> tuple[str, ...]:
    """Register each `schema_op` function's two ops under `namespace` (once; later calls do
    nothing); returns their names."""
    return register_specs(namespace, lambda: [spec_of(fn) for fn in fns])


def register_specs(
    namespace: str,
    specs: Callable[[], Iterable[OpSpec]],
    autograd: Callable[[dict[str, Any]], None] | None = None,
    outs_of: Mapping[str, OutsOf] = MappingProxyType({}),
    results_of: Mapping[str, ResultOf] = MappingProxyType({}),
) -> tuple[str, ...]:
    """Register the ops of `specs()` under `namespace` (once: later calls do nothing), then
    `autograd(defs)`, then the stand-ins (`substitute`, adapted per op by `outs_of` /
    `results_of`); returns the names of the ops."""
    with _LOCK:
        if namespace not in _DEFS:
            if not hasattr(torch.library, "custom_op"):
                raise ImportError(
                    f"{namespace}'s torch ops need torch >= 2.4 (torch.library.custom_op); this "
                    f"is torch {torch.__version__}: upgrade torch, or call the functions eagerly"
                )
            specs_ = tuple(specs())
            defs = {}
            for spec in specs_:
                defs[spec.name] = functional_op(namespace, spec)
                defs[spec.name + "_out"] = out_op(namespace, spec)
            if autograd is not None:
                autograd(defs)
            _DEFS[namespace] = defs  # only once every op is in: a failed attempt is retried
            substitute(namespace, specs_, outs_of, results_of)
        return tuple(_DEFS[namespace])


def registered(namespace: str) -> tuple[str, ...]:
    """Names of the ops registered under `namespace` (none before `register_specs`)."""
    return tuple(_DEFS.get(namespace, ()))


def spec_of(fn: Callable[..., Any]) -> OpSpec:
    """The `OpSpec` of a `schema_op` function: its arguments, outputs and fake from
    ``fn.schema``."""
    schema = fn.schema
    args = [f"Tensor {t.api}" for t in schema.inputs]
    args += [f"{_KERNEL_TYPES[c]} {n}" for n, c in schema.scalars]
    return OpSpec(fn, ", ".join(args), schema.torch_outs(), schema_fake(schema, fn))


def schema_fake(schema: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    """The fake of public function `fn` of `schema` (tileaot/_schema.py): it takes the op's
    arguments in the function's order (trailing defaults may be left out) and returns the
    schema's `OpSchema.fake` (one tensor, or a tuple)."""
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

    return fake


def functional_op(namespace: str, spec: OpSpec) -> Any:
    """``<namespace>::<op>``: the function's arguments in, new tensors out."""
    bind = _binder(spec.args)
    fn, fake, fixed, dense = spec.fn, spec.fake, spec.fixed, spec.dense
    several = len(spec.outs) > 1

    def impl(*args: Any, **kwargs: Any) -> Any:
        result = fn(**_densified(bind(args, kwargs), dense), **fixed)
        return tuple(result) if several else result  # a NamedTuple becomes a plain tuple

    def fake_impl(*args: Any, **kwargs: Any) -> Any:
        return fake(*bind(args, kwargs).values())

    op = torch.library.custom_op(
        f"{namespace}::{spec.name}",
        impl,
        mutates_args=(),
        schema=f"({spec.args}) -> {_returns(spec.outs)}",
    )
    op.register_fake(fake_impl)
    return op


def out_op(namespace: str, spec: OpSpec) -> Any:
    """``<namespace>::<op>_out``: the output tensors, then the function's arguments; returns
    nothing."""
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
        f"{namespace}::{spec.name}_out", impl, mutates_args=out_names, schema=f"({args}) -> ()"
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


def substitute(
    namespace: str,
    specs: Sequence[OpSpec],
    outs_of: Mapping[str, OutsOf] = MappingProxyType({}),
    results_of: Mapping[str, ResultOf] = MappingProxyType({}),
) -> None:
    """Let ``torch.compile`` trace a call of each public function as its op.

    Dynamo cannot trace into the function: it reads ``data_ptr()`` and calls the native module,
    so compiled code calling it would break the graph there (an error with ``fullgraph=True``).
    ``torch.compiler.substitute_in_graph`` registers a stand-in that Dynamo inlines instead;
    eager calls never see it. Failures only warn (once): the ops themselves are registered.
    """
    hook = getattr(torch.compiler, "substitute_in_graph", None)
    failed: dict[str, list[str]] = {}  # reason -> functions
    for spec in specs:
        try:
            if hook is None:
                raise NotImplementedError("torch.compiler.substitute_in_graph needs torch >= 2.5")
            adapt = outs_of.get(spec.name, _padded), results_of.get(spec.name, _as_is)
            hook(spec.fn)(_stand_in(namespace, spec, *adapt))
        except Exception as e:  # noqa: BLE001 (whatever it is, the op itself still works)
            failed.setdefault(f"{type(e).__name__}: {e}", []).append(spec.name)
    if failed:
        reasons = "; ".join(f"{', '.join(names)}: {why}" for why, names in failed.items())
        warnings.warn(
            f"{namespace}: torch.compile cannot trace calls of these functions ({reasons}); "
            f"call torch.ops.{namespace}.<op> in compiled code instead",
            stacklevel=4,
        )


def _stand_in(
    namespace: str, spec: OpSpec, outs_of: OutsOf, result_of: ResultOf
) -> Callable[..., Any]:
    """Maps the function's arguments (positional, keyword, defaults, ``out=``) onto the op or
    its ``_out`` op and returns what the function returns."""
    # Only plain values in the closure: Dynamo inlines `stand_in` and must wrap each of them.
    fn_name = spec.name
    params = inspect.signature(spec.fn).parameters
    known = frozenset(params)
    positional = tuple(n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD)
    defaults = {n: p.default for n, p in params.items() if p.default is not p.empty}
    ops = getattr(torch.ops, namespace)
    op = getattr(ops, fn_name)
    names = tuple(a.name for a in op.default._schema.arguments)
    out_op_ = getattr(ops, f"{fn_name}_out")
    n_out = len(spec.outs)

    def stand_in(*args: Any, **kwargs: Any) -> Any:  # (*args, **kwargs): Dynamo's wildcard
        for name in kwargs:
            if name not in known:
                raise TypeError(f"{fn_name}() got an unexpected keyword argument {name!r}")
        given = {**defaults, **dict(zip(positional, args, strict=False)), **kwargs}
        values = [given[name] for name in names]
        out = given["out"]
        if out is None:
            return result_of(op(*values), given)
        outs = (out,) if n_out == 1 else outs_of(out, n_out, given)
        out_op_(*outs, *values)
        return result_of(out if n_out == 1 else outs, given)

    return stand_in


def _padded(out: Any, n_out: int, given: dict) -> tuple:
    """An ``out`` tuple, with None for the optional outputs it leaves out (moe_expand, bf16)."""
    return (*out, *(None,) * (n_out - len(out)))


def _as_is(result: Any, given: dict) -> Any:
    return result
