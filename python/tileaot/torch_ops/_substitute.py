"""Let ``torch.compile`` trace a call of a public function (``tileaot.rms_norm(...)``) as the op.

Dynamo cannot trace into a wrapper: it reads ``data_ptr()`` and calls the native module, so a
compiled function calling ``tileaot.<op>`` would break the graph there (an error with
``fullgraph=True``). ``torch.compiler.substitute_in_graph`` (torch >= 2.5) registers a stand-in
that Dynamo inlines in place of the wrapper; eager calls never see it, so they cost nothing more.
Each stand-in maps the wrapper's arguments (positional, keyword, defaults, ``out=``) onto
``torch.ops.tileaot.<op>`` or ``<op>_out`` and returns what the wrapper returns.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

import torch

from ..moe_expand import MoeExpandResult
from ._specs import OpSpec


def substitute_wrappers(specs: tuple[OpSpec, ...]) -> None:
    """Register every stand-in; failures only warn (once): the ops themselves are registered."""
    substitute = getattr(torch.compiler, "substitute_in_graph", None)
    failed: dict[str, list[str]] = {}  # reason -> functions
    for spec in specs:
        try:
            if substitute is None:
                raise NotImplementedError("torch.compiler.substitute_in_graph needs torch >= 2.5")
            substitute(spec.fn)(_stand_in(spec))
        except Exception as e:  # noqa: BLE001 (whatever it is, the op itself still works)
            failed.setdefault(f"{type(e).__name__}: {e}", []).append(spec.name)
    if failed:
        reasons = "; ".join(f"{', '.join(names)}: {why}" for why, names in failed.items())
        warnings.warn(
            f"tileaot: torch.compile cannot trace calls of these tileaot functions ({reasons}); "
            "call torch.ops.tileaot.<op> in compiled code instead",
            stacklevel=3,
        )


def _stand_in(spec: OpSpec) -> Callable[..., Any]:
    # Only plain values in the closure: Dynamo inlines `stand_in` and must wrap each of them.
    fn_name = spec.name
    params = inspect.signature(spec.fn).parameters
    known = frozenset(params)
    positional = tuple(n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD)
    defaults = {n: p.default for n, p in params.items() if p.default is not p.empty}
    op = getattr(torch.ops.tileaot, fn_name)
    names = tuple(a.name for a in op.default._schema.arguments)
    out_op = getattr(torch.ops.tileaot, f"{fn_name}_out")
    n_out = len(spec.outs)
    outs_of = _OUTS.get(fn_name, _padded)
    result_of = _RESULTS.get(fn_name, _as_is)

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        for name in kwargs:
            if name not in known:
                raise TypeError(f"{fn_name}() got an unexpected keyword argument {name!r}")
        given = {**defaults, **dict(zip(positional, args, strict=False)), **kwargs}
        values = [given[name] for name in names]
        out = given["out"]
        if out is None:
            return result_of(op(*values), given)
        outs = (out,) if n_out == 1 else outs_of(out, n_out, given)
        out_op(*outs, *values)
        return result_of(out if n_out == 1 else outs, given)

    return stand_in


def _padded(out: Any, n_out: int, given: dict) -> tuple:
    """An ``out`` tuple, with None for the optional outputs it leaves out (moe_expand, bf16)."""
    return (*out, *(None,) * (n_out - len(out)))


def _engram_gate_outs(out: Any, n_out: int, given: dict) -> tuple:
    """``out`` alone (the gate then goes to a new tensor, as in the wrapper) or ``(out, g)``."""
    if isinstance(out, (tuple, list)):
        return tuple(out)
    h = given["h"]
    return out, h.new_empty(h.shape[:-1], dtype=torch.float32)


def _as_is(result: Any, given: dict) -> Any:
    return result


_OUTS = {"engram_gate": _engram_gate_outs}
_RESULTS = {
    "engram_gate": lambda result, given: result if given["return_gate"] else result[0],
    "moe_expand": lambda result, given: MoeExpandResult(*result),
}
