"""A public op function made from an `OpSchema` alone, for ops with no hand-written wrapper.

`schema_op(schema)` returns ``op(<inputs>, <scalars>, *, out=None)``: the schema's input tensors
(their API names, in kernel order), then its scalars, then ``out=`` (one tensor, or a tuple in
the schema's output order). It does what a hand-written wrapper such as ``tileaot.rms_norm``
does, all of it derived from the schema:

* the short path for torch tensors of the kernel's exact ranks (outputs allocated from the
  input shapes, one `_lib.fast` call that checks everything in C++);
* other frameworks' arrays through DLPack (`_arrays.call`);
* the checked path: `OpSchema.bind` / `outputs` (dtypes, ranks, tied dims, device, layout,
  int32 range, ``out=``, overlap; errors name the argument), each scalar checked against its
  kernel type, no launch when every output is empty, then the launch (a `VariantMissError`
  when the build has no variant for the dtypes, sizes or GPU).

Used by the packages `python -m build_tools wheel --kernels MODULE` builds (kernels kept outside
this repository): there the schema is the whole contract, so the key may only be formed from
dtype variables and no tensor may be optional (`unsupported` says why a schema cannot be used).
The function is generated as source text once per op (as `_schema`'s bind and launch are), so
its hot path is as straight as a hand-written one.
"""

from __future__ import annotations

import numbers
import re
import string
from collections.abc import Callable
from typing import Any

from . import _arrays, _lib
from ._schema import LITERALS, OpSchema

# Kernel scalar types -> (Python type the short path takes, the check of the checked path).
_INT_RANGE = {"int32": 1 << 31, "int64": 1 << 63}
SCALAR_TYPES = ("float32", "float64", "int32", "int64")


def unsupported(schema: OpSchema) -> str | None:
    """Why `schema` cannot make a function by itself (a one-line reason), or None."""
    fields = [f for _, f, _, _ in string.Formatter().parse(schema.key) if f]
    extra = [f for f in fields if f not in schema.dtypes]
    if extra:
        return f"its key {schema.key!r} uses {extra[0]!r}, which is no dtype variable"
    optional = [t.name for t in schema.inputs if t.optional]
    if optional:
        return f"tensor {optional[0]!r} is optional (an optional tensor needs a wrapper)"
    bad = [f"{n}: {c}" for n, c in schema.scalars if c not in SCALAR_TYPES]
    if bad:
        return f"scalar {bad[0]} is not one of {', '.join(SCALAR_TYPES)}"
    if not schema.outs:
        return "it has no output tensor"
    if any(t.role == "scratch" for t in schema.tensors):
        return "it has scratch tensors (their allocation needs a wrapper)"
    names = [t.api for t in schema.inputs] + [n for n, _ in schema.scalars]
    if "out" in names:
        return "an input or scalar is named 'out' (the name of the output argument)"
    sizes = {d.name for t in schema.tensors for d in t.dims if d.name}
    clash = [n for n in names if n in sizes | {schema.op} or (n[0] == "_" and n[-1] == "_")]
    if clash:
        return (
            f"the name {clash[0]!r} is also a size's or the op's, or of the form _x_ (the "
            "generated code's)"
        )
    return None


def scalar(name: str, value: Any, ctype: str) -> float | int:
    """`value` checked for a kernel scalar of type `ctype` (the checked path's rule)."""
    if ctype.startswith("float"):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    limit = _INT_RANGE[ctype]
    if not -limit <= value < limit:
        raise ValueError(f"{name} must fit in {ctype}: -{limit} <= {name} < {limit}; got {value}")
    return int(value)


def schema_op(schema: OpSchema, doc: str = "", module: str | None = None) -> Callable[..., Any]:
    """The public function of `schema` (see the module docstring); `doc` starts its docstring,
    the contract (shapes, dtypes, errors) follows; `module` is its ``__module__``."""
    why = unsupported(schema)
    if why:
        raise ValueError(f"op {schema.op}: no function from its schema alone: {why}")
    src = _source(schema)
    scope: dict[str, Any] = {
        "_A_": _arrays,
        "_fast_": _lib.fast,
        "_learn_": _lib.learn,
        "_scalar_": scalar,
        "_SCHEMA_": schema,
        "_WRITES_": schema.writes,
        "_OP_": schema.op,
    }
    # dont_inherit: this module's `from __future__ import annotations` would quote them twice
    exec(compile(src, f"<tileaot op {schema.op}>", "exec", dont_inherit=True), scope)  # noqa: S102
    fn = scope[schema.op]
    fn.__source__ = src
    fn.schema = schema  # what `_schema_torch.register` makes the torch op of
    fn.__doc__ = contract(schema, doc)
    if module:
        fn.__module__ = module
    return fn


def _holders(schema: OpSchema) -> dict[str, str]:
    """Dtype variable -> the first input holding it (the one whose dtype picks the key)."""
    holders: dict[str, str] = {}
    for t in schema.inputs:
        if t.dtype in schema.dtypes:
            holders.setdefault(t.dtype, t.api)
    return holders


def _source(schema: OpSchema) -> str:
    ins = [t.api for t in schema.inputs]
    scalars = [n for n, _ in schema.scalars]
    name, outs = schema.op, schema.outs
    holders = _holders(schema)
    fast_key = ", ".join(["_OP_", *(f"{h}.dtype" for h in holders.values())])
    lines = [f"def {header(schema)}:"]
    # The short path: torch tensors of exactly the kernel's ranks (leading dims not collapsed),
    # scalars of the kernel's Python type; `fast` checks the rest in C++.
    conds = [f"type({ins[0]}) is _A_.Tensor"]
    conds += [f"isinstance({n}, _A_.Tensor)" for n in ins[1:]]  # an nn.Parameter too
    conds += [f"{n}.dim() == {len(t.dims)}" for n, t in zip(ins, schema.inputs, strict=True)]
    for n, c in schema.scalars:
        conds.append(f"type({n}) is {'float' if c.startswith('float') else 'int'}")
        if c.startswith("int"):
            conds.append(f"-{_INT_RANGE[c]} <= {n} < {_INT_RANGE[c]}")
    lines.append(f"    if {' and '.join(conds)}:")
    made = [_new_output(schema, t, holders) for t in outs]
    sizes = _fast_sizes(schema, " ".join(made))  # only what the allocation reads
    lines.append("        if out is None:")
    lines += [f"            {line}" for line in sizes]
    if len(outs) == 1:
        lines.append(f"            _o_ = {made[0]}\n        else:\n            _o_ = out")
    else:
        given = f"type(out) in (tuple, list) and len(out) == {len(outs)}"
        lines.append(f"            _os_ = ({', '.join(made)},)")
        lines.append(f"        elif {given}:\n            _os_ = tuple(out)")
        lines.append("        else:\n            _os_ = None")
    order = _kernel_order(schema, "_o_" if len(outs) == 1 else "_os_[{i}]")
    result = "_o_" if len(outs) == 1 else "_os_"
    guard = "" if len(outs) == 1 else "_os_ is not None and "
    lines.append(
        f"        if {guard}_fast_(({fast_key},), ({order},), "
        f"({''.join(s + ', ' for s in scalars)}), _WRITES_):\n            return {result}"
    )
    call_args = ", ".join([*ins, *scalars, "out=out"])
    lines.append(f"    elif type({ins[0]}) is not _A_.Tensor and _A_.foreign({ins[0]}):")
    lines.append(f"        return _A_.call({name}, locals())")
    lines.append(f"    return _checked_({call_args})")
    lines += _checked_source(schema, ins, scalars, holders, fast_key)
    return "\n".join(lines) + "\n"


def header(schema: OpSchema) -> str:
    """The function's name, annotated parameters and return type (its def line, and the stub
    an external wheel ships for type checkers): torch tensors, as for tileaot's own ops."""
    tensors = [f"{t.api}: 'torch.Tensor'" for t in schema.inputs]
    scalars = [f"{n}: {'float' if c.startswith('float') else 'int'}" for n, c in schema.scalars]
    one = len(schema.outs) == 1
    result = (
        "'torch.Tensor'" if one else f"'tuple[{', '.join(['torch.Tensor'] * len(schema.outs))}]'"
    )
    out = f"out: {result[:-1]} | None' = None"
    return f"{schema.op}({', '.join([*tensors, *scalars])}, *, {out}) -> {result}"


def _fast_sizes(schema: OpSchema, uses: str) -> list[str]:
    """Size names from the input shapes (the first input mentioning a name), for allocation:
    those that the expressions `uses` read."""
    lines, bound = [], set()
    used = set(re.findall(r"[A-Za-z_]\w*", uses))
    for t in schema.inputs:
        for i, d in enumerate(t.dims):
            if d.name and d.name not in bound and d.name in used:
                bound.add(d.name)
                size = f"{t.api}.shape[{i}]"
                lines.append(f"{d.name} = {size}" + (f" // {d.factor}" if d.factor > 1 else ""))
    return lines


def _shape(t, lead: str | None = None) -> str:
    dims = [d.name if d.lead else _dim(d) for d in t.dims]
    if lead is not None and t.lead:
        return "(*" + lead + ", " + "".join(f"{e}, " for e in dims[1:]) + ")"
    return "(" + "".join(f"{e}, " for e in dims) + ")"


def _dim(d) -> str:
    if d.text.isdigit():
        return d.text
    if d.name is not None:
        return d.name if d.factor == 1 else f"{d.factor} * {d.name}"
    return f"({d.text})"


def _new_output(schema: OpSchema, t, holders: dict[str, str]) -> str:
    """The short path's allocation of output `t`: like an input of its very dims and dtype
    (``x.new_empty(x.shape)``, as a hand-written op does), else from the sizes."""
    dims = [d.text for d in t.dims]
    for i in schema.inputs:
        if [d.text for d in i.dims] == dims and i.dtype == t.dtype:
            return f"{i.api}.new_empty({i.api}.shape)"
    first = schema.inputs[0]
    if t.dtype == first.dtype:
        return f"{first.api}.new_empty({_shape(t)})"
    dtype = f"{holders[t.dtype]}.dtype" if t.dtype in holders else _literal(t.dtype)
    return f"{first.api}.new_empty({_shape(t)}, dtype={dtype})"


def _literal(short: str) -> str:
    return f"_A_._torch.{LITERALS[short][0]}"


def _kernel_order(schema: OpSchema, out_ref: str) -> str:
    """The tensors in kernel order, the outputs as `out_ref` formats them."""
    names, k = [], 0
    for t in schema.tensors:
        if t.role == "in":
            names.append(t.api)
        else:
            names.append(out_ref.format(i=k))
            k += 1
    return ", ".join(names) + ("," if len(names) == 1 else "")


def _checked_source(schema, ins, scalars, holders, fast_key) -> list[str]:
    n_out = len(schema.outs)
    lines = [f"def _checked_({', '.join([*ins, *scalars])}, out):"]
    lines.append(f"    _in_ = {{{', '.join(f'{n!r}: {n}' for n in ins)}}}")
    lines.append("    _b_ = _SCHEMA_.bind(_in_)")
    lines += [f"    {n} = _scalar_({n!r}, {n}, {c!r})" for n, c in schema.scalars]
    lines.append(f"    _os_ = _SCHEMA_.outputs(_A_.namespace({ins[0]}), {ins[0]}, _b_, out, _in_)")
    result = "_os_[0]" if n_out == 1 else "_os_"
    lines.append(f"    if all(_o.numel() == 0 for _o in _os_):\n        return {result}")
    key = f"{schema.key!r}.format(**_b_.picked)"
    order = _kernel_order(schema, "_os_[{i}]")
    lines.append(
        f"    _h_ = _SCHEMA_.launch({key}, _b_.device, ({order}), "
        f"({''.join(s + ', ' for s in scalars)}), _b_.dims)"
    )
    torch_args = " and ".join(f"isinstance({n}, _A_.Tensor)" for n in ins)
    lines.append(f"    if {torch_args}:\n        _learn_(({fast_key},), _h_)")
    lines.append(f"    return {result}")
    return lines


def contract(schema: OpSchema, doc: str = "") -> str:
    """The function's docstring: `doc` (the op's own words), then what the schema states."""
    lines = [doc.strip() or f"The {schema.op} kernel.", "", "Args:"]
    for t in schema.inputs:
        lines.append(f"    {t.api}: CUDA tensor of shape ``{t.pattern()}``, {_dtypes(schema, t)}.")
    for n, c in schema.scalars:
        lines.append(f"    {n}: {'a real number' if c.startswith('float') else 'an int'} ({c}).")
    outs = ", ".join(f"`{t.name}` ``{t.pattern()}`` {_dtypes(schema, t)}" for t in schema.outs)
    lines.append(
        "    out: optional output to write into instead of allocating"
        + (" (a tuple in the order below)" if len(schema.outs) > 1 else "")
        + "."
    )
    lines += ["", "Returns:", f"    {outs}."]
    lines += [
        "",
        "Tensors are contiguous, 16-byte aligned, on one CUDA device; sizes and element counts",
        "stay below 2**31. The kernel is enqueued on the current stream; nothing synchronises.",
        "",
        "Raises:",
        "    TypeError / ValueError: an argument breaks the contract above (the message names it).",
        "    VariantMissError: the build has no variant for these dtypes, sizes or this GPU.",
        "    DriverError: the CUDA driver is missing or a driver call failed.",
    ]
    return "\n".join(lines)


def _dtypes(schema: OpSchema, t) -> str:
    if t.dtype in LITERALS:
        return f"dtype {LITERALS[t.dtype][0]}"
    allowed = " or ".join(LITERALS[s][0] for s in schema.dtypes[t.dtype])
    return f"dtype {allowed} ({t.dtype})"
