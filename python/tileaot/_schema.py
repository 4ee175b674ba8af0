"""One statement of an op's contract, and everything mechanical derived from it.

An op module states its schema once::

    SCHEMA = OpSchema(
        "rms_norm",
        "x[*M, N]: T, weight[N]: T -> y[*M, N]: T as out; eps: float32",
        dtypes={"T": ("bf16", "fp16", "fp32")},
        key="{T}",
        example={"M": 4096, "N": 4096},
    )

Grammar (the tensors in the kernel's parameter order, then its scalars):

* ``inputs -> outputs [scratch ...]; scalars``; each tensor ``name[dims]: dtype``, with
  ``?`` after the name for an optional one and ``as public`` for an output the API names otherwise
  (``y ... as out``: the kernel writes `y`, callers pass ``out=``).
* a dim is a size name (``N``), an integer, ``k*N`` (an input dim that must be a multiple of `k`;
  it binds ``N = dim / k``), ``*M`` as the first dim (any number of leading dims, viewed as one
  of size ``M`` = their product), or for outputs any integer expression over names (``N // 128``).
  The first input that mentions a name binds it; every later use must agree.
* a dtype is a dtype variable (its allowed short names in `dtypes`; the first input holding it
  picks the value, the others must match) or a literal: ``bf16 fp16 fp32 e4m3 u8 i32``.
* `key` formats the dispatch key from the dtype variables (and `extra` fields the wrapper passes).

From it come: the checked path's mechanical checks (`bind`: dtype by key, ranks, tied dims, device,
contiguity, alignment, int32 range; `outputs`: allocation or `out=` checks, overlap), the launch
(`launcher`: straight-line code generated once per op, the pointer tuple and flat shapes in the
kernel's order), the short path's tensor tuple and output bits (`writes`), the `info` example
(`example_shapes`), the torch custom-op schema text and fake (`torch_returns`, `fake`), and the
build-time check against the traced kernel (`check_signature`). Torch-free: `build_tools`
imports this module to check traces, and `import tileaot` must not import torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from . import _lib, _validate

# Literal dtypes: short name -> (torch/namespace attribute, TVM name in traced signatures).
LITERALS = {
    "bf16": ("bfloat16", "bfloat16"),
    "fp16": ("float16", "float16"),
    "fp32": ("float32", "float32"),
    "e4m3": ("float8_e4m3fn", "float8_e4m3fn"),
    "u8": ("uint8", "uint8"),
    "i32": ("int32", "int32"),
}
_TVM = {short: tvm for short, (_, tvm) in LITERALS.items()}
_NAME = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class Dim:
    text: str  # as written: "N", "128", "2*H", "*M", "N // 128"
    name: str | None = None  # the size it binds or must equal
    factor: int = 1  # "2*H": the dim is 2 * H
    lead: bool = False  # "*M": any number of leading dims, product M

    @staticmethod
    def parse(text: str) -> Dim:
        text = text.strip()
        if text.startswith("*"):
            return Dim(text, text[1:].strip(), lead=True)
        if text.isdigit():
            return Dim(text)
        if _NAME.fullmatch(text):
            return Dim(text, text)
        m = re.fullmatch(r"(\d+)\s*\*\s*([A-Za-z_]\w*)", text)
        if m:
            return Dim(text, m.group(2), factor=int(m.group(1)))
        return Dim(text)  # an expression: outputs only

    def value(self, dims: Mapping[str, int]) -> int:
        if self.text.isdigit():
            return int(self.text)
        if self.name is not None:
            return self.factor * dims[self.name]
        return int(eval(self.text, {"__builtins__": {}}, dict(dims)))  # noqa: S307 - our grammar


class Bound(NamedTuple):
    """What `OpSchema.bind` found: dtype variable -> short name, sizes, device, leading dims."""

    picked: dict[str, str]
    dims: dict[str, int]
    device: int
    lead: tuple  # the leading dims of the first ``*M`` input (the outputs' leading dims)


@dataclass(frozen=True)
class TensorSpec:
    name: str  # the kernel's parameter name
    dims: tuple[Dim, ...]
    dtype: str  # a dtype variable or a literal short name
    role: str  # "in", "out" or "scratch"
    optional: bool = False
    public: str | None = None  # the API's name where it differs (`out`)

    @property
    def api(self) -> str:
        return self.public or self.name

    @property
    def lead(self) -> bool:
        return bool(self.dims) and self.dims[0].lead

    def pattern(self) -> str:
        """The shape as documented: ``(..., N)`` for a leading-dims tensor, else ``[M, N]``."""
        if self.lead:
            return "(" + ", ".join(["...", *(d.text for d in self.dims[1:])]) + ")"
        inner = ", ".join(d.text for d in self.dims)
        return f"({inner},)" if len(self.dims) == 1 else f"[{inner}]"


def _parse_tensor(text: str, role: str) -> TensorSpec:
    m = re.fullmatch(r"\s*(\w+)(\?)?\s*\[(.*)\]\s*:\s*(\w+)\s*(?:as\s+(\w+))?\s*", text)
    if not m:
        raise ValueError(f"schema: cannot read tensor {text!r}")
    name, opt, dims, dtype, public = m.groups()
    parsed = tuple(Dim.parse(d) for d in dims.split(",")) if dims.strip() else ()
    return TensorSpec(name, parsed, dtype, role, bool(opt), public)


def _split(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in (*parts, cur) if p.strip()]


@dataclass
class OpSchema:
    """An op's contract: see the module docstring for the grammar."""

    op: str
    text: str
    dtypes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    key: str = "{T}"
    example: Mapping[str, int] = field(default_factory=dict)
    tensors: tuple[TensorSpec, ...] = ()
    scalars: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        body, _, scalars = self.text.partition(";")
        ins, _, outs = body.partition("->")
        tensors = [_parse_tensor(t, "in") for t in _split(ins)]
        for t in _split(outs):
            role = "scratch" if t.strip().startswith("scratch ") else "out"
            tensors.append(_parse_tensor(t.strip().removeprefix("scratch "), role))
        self.tensors = tuple(tensors)
        self.scalars = tuple(
            tuple(s.replace(" ", "").split(":"))
            for s in _split(scalars)  # type: ignore[misc]
        )
        for t in self.tensors:
            if t.dtype not in LITERALS and t.dtype not in self.dtypes:
                raise ValueError(f"schema {self.op}: {t.name} has unknown dtype {t.dtype!r}")
        self._launch: Callable | None = None
        self._bind: Callable | None = None
        self._outputs: Callable | None = None
        # The short path's output bits: bit i set for each tensor (kernel order) the kernel
        # writes. A plain attribute: the ops read it on every call.
        self.writes = sum(1 << i for i, t in enumerate(self.tensors) if t.role != "in")

    # ------------------------------------------------------------ derived facts
    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return tuple(t for t in self.tensors if t.role == "in")

    @property
    def outs(self) -> tuple[TensorSpec, ...]:
        return tuple(t for t in self.tensors if t.role == "out")

    def flat(self, dims: Mapping[str, int]) -> tuple[int, ...]:
        """The flat shapes the kernel takes: every dim of every tensor, in kernel order."""
        return tuple(
            d.value(dims) if not d.lead else dims[d.name] for t in self.tensors for d in t.dims
        )

    def describe(self, dims: Mapping[str, int]) -> str:
        """A call's input matrices as text: ``x[4096, 7168]`` (what `info` and `check` print)."""
        return " ".join(
            f"{t.name}[{', '.join(_shown(d, dims) for d in t.dims)}]"
            for t in self.inputs
            if len(t.dims) >= 2
        )

    def example_shapes(self, key: str) -> tuple[str, tuple[int, ...]]:
        """A typical call for `python -m tileaot info`: its description and flat shapes, from
        the schema's `example` sizes."""
        return self.describe(self.example), self.flat(self.example)

    # ------------------------------------------------------------ the checked path
    def bind(self, args: Mapping[str, Any]) -> Bound:
        """Check the input tensors (`args`: API name -> tensor or None for optional ones):
        dtypes, ranks, tied dims, then device and layout. Raises TypeError/ValueError naming
        the argument.

        Straight-line code generated for this schema (`_compile_bind`) checks a valid call with
        one condition per rule; any failure reruns `bind_checked`, the rule-by-rule version
        that works out which rule broke and says so."""
        if self._bind is None:
            self._bind = _compile_bind(self)
        return self._bind(args)

    def bind_checked(self, args: Mapping[str, Any]) -> Bound:
        """`bind`, one rule at a time (the slow path: it raises the precise error)."""
        picked: dict[str, str] = {}
        first: dict[str, tuple[str, Any]] = {}
        for spec in self.inputs:
            t = args[spec.api]
            if t is None and spec.optional:
                continue
            if spec.dtype in LITERALS:
                _literal_dtype(spec.api, t, spec.dtype)
            elif spec.dtype in first:
                _validate.same_dtype(spec.api, t, *first[spec.dtype])
            else:
                picked[spec.dtype] = _validate.dtype_key(spec.api, t, self.dtypes[spec.dtype])
                first[spec.dtype] = (spec.api, t)
        dims: dict[str, int] = {}
        binder: dict[str, tuple[str, tuple]] = {}
        present = []
        lead = None
        for spec in self.inputs:
            t = args[spec.api]
            if t is None:
                continue
            present.append((spec.api, t))
            shape = tuple(t.shape)
            self._bind_dims(spec, shape, dims, binder)
            if spec.lead and lead is None:
                lead = shape[: len(shape) - len(spec.dims) + 1]
        names, tensors = zip(*present, strict=True)
        device = _validate.check_memory(names, tensors)
        return Bound(picked, dims, device, lead or ())

    def _bind_dims(self, spec: TensorSpec, shape: tuple, dims: dict, binder: dict) -> None:
        fixed = spec.dims[1:] if spec.lead else spec.dims
        if len(shape) < len(fixed) if spec.lead else len(shape) != len(fixed):
            got = "a 0-d tensor" if not shape else f"shape {shape}"
            # The sizes other tensors bound are filled in: "weight must have shape (64,)".
            raise ValueError(f"{spec.api} must have shape {self._expected(spec, dims)}; got {got}")
        tail = shape[len(shape) - len(fixed) :]
        before = dict(dims)  # what other tensors bound: the sizes a message may fill in
        if spec.lead:
            dims.setdefault(spec.dims[0].name, math.prod(shape[: len(shape) - len(fixed)]))
        for i, (d, v) in enumerate(zip(fixed, tail, strict=True)):
            axis = i - len(fixed) if spec.lead else i
            if d.text.isdigit():
                if v != int(d.text):
                    raise ValueError(
                        f"{spec.api} must have shape {spec.pattern()}: its dim {axis} is {v}, "
                        f"not {d.text}"
                    )
                continue
            if d.name is None:
                raise ValueError(f"schema {self.op}: input dim {d.text!r} binds no size")
            if v % d.factor:
                raise ValueError(
                    f"{spec.api} must have shape {spec.pattern()}: its dim {axis} is {v}, not a "
                    f"multiple of {d.factor}"
                )
            size = v // d.factor
            if d.name not in dims:
                dims[d.name], binder[d.name] = size, (spec.api, shape)
            elif dims[d.name] != size:
                by, by_shape = binder.get(d.name, (None, None))
                match = f" to match {by} {by_shape}" if by else ""
                raise ValueError(
                    f"{spec.api} must have shape {self._expected(spec, before)}{match}; got {shape}"
                )

    def _expected(self, spec: TensorSpec, dims: Mapping[str, int]) -> str:
        """`spec`'s documented shape with the sizes bound so far filled in: ``(65,)``."""
        filled = [
            str(d.value(dims)) if _maybe_value(d, dims) is not None else d.text
            for d in (spec.dims[1:] if spec.lead else spec.dims)
        ]
        if spec.lead:
            return "(" + ", ".join(["...", *filled]) + ")"
        return f"({filled[0]},)" if len(filled) == 1 else f"[{', '.join(filled)}]"

    def out_shape(self, spec: TensorSpec, dims: Mapping[str, int], lead: tuple) -> tuple:
        """An output's public shape: the leading dims of the inputs, then its own."""
        own = tuple(d.value(dims) for d in (spec.dims[1:] if spec.lead else spec.dims))
        return (*lead, *own) if spec.lead else own

    def outputs(self, fw: Any, like: Any, b: Bound, out: Any, inputs: Mapping[str, Any]) -> tuple:
        """The output tensors: allocated like `like` (its framework and device), or `out=`
        checked (type, dtype, shape, device, layout, no overlap with inputs or each other)."""
        if self._outputs is None:
            self._outputs = _compile_outputs(self)
        return self._outputs(fw, like, b, out, inputs)

    # ------------------------------------------------------------ the launch
    def launcher(self) -> Callable:
        """``launch(handle, device, stream, *tensors, *scalars, **dims)`` in kernel order: one
        `_C.launch` with the data pointers and flat shapes, as straight-line code (generated
        once; no loops or lookups on the hot path)."""
        if self._launch is None:
            self._launch = _compile_launcher(self)
        return self._launch

    def launch(self, key: str, device: int, tensors: tuple, scalars: tuple, dims: dict) -> int:
        """Look up (op, key) and launch on the current stream; returns the handle."""
        handle = _lib.handle(self.op, key)
        self.launcher()(handle, device, _lib.current_stream(device), *tensors, *scalars, **dims)
        return handle

    # ------------------------------------------------------------ torch and the build
    def torch_outs(self) -> tuple[str, ...]:
        """Output names of the torch custom op (the `_out` op's arguments)."""
        return tuple(s.api for s in self.outs)

    def fake(self, inputs: Mapping[str, Any], fw: Any) -> tuple:
        """Empty stand-ins of the outputs for torch's fake tensors (symbolic sizes welcome):
        shapes from the inputs' dims, dtypes from the schema; no checks."""
        picked: dict[str, str] = {}
        dims: dict[str, Any] = {}
        lead: tuple = ()
        like = None
        for spec in self.inputs:
            t = inputs[spec.api]
            if t is None:
                continue
            like = like if like is not None else t
            if spec.dtype not in LITERALS and spec.dtype not in picked:
                picked[spec.dtype] = _short_of(t.dtype)
            shape = tuple(t.shape)
            fixed = spec.dims[1:] if spec.lead else spec.dims
            tail = shape[len(shape) - len(fixed) :]
            if spec.lead and not lead:
                lead = shape[: len(shape) - len(fixed)]
                dims.setdefault(spec.dims[0].name, math.prod(lead))
            for d, v in zip(fixed, tail, strict=True):
                if d.name is not None:
                    dims.setdefault(d.name, v // d.factor)
        return tuple(
            like.new_empty(
                self.out_shape(s, dims, lead),
                dtype=getattr(fw, LITERALS[_short(s.dtype, picked)][0]),
            )
            for s in self.outs
        )

    def check_signature(self, params: list[dict], key: Mapping[str, str], spec: Mapping) -> None:
        """Compare a traced kernel signature (`build_tools.trace.Signature.params` as dicts)
        with the schema: names, order, kinds, ranks, dtypes for this key, and every fixed or
        specialised dim. ValueError naming the op and the first mismatch."""
        want = [(t.name, "tensor") for t in self.tensors] + [(n, "scalar") for n, _ in self.scalars]
        got = [(p["name"], p["kind"]) for p in params]
        if want != got:
            raise ValueError(f"{self.op}: kernel parameters {got} differ from the schema's {want}")
        values = {**{k: v for k, v in spec.items() if isinstance(v, int)}}
        for t, p in zip(self.tensors, params, strict=False):
            where = f"{self.op} ({dict(key)}, {dict(spec) or 'generic'}): tensor {t.name}"
            if len(p["shape"]) != len(t.dims):
                raise ValueError(f"{where} has rank {len(p['shape'])}, the schema {len(t.dims)}")
            dtype = _TVM.get(t.dtype) or _TVM[_dtype_short(key, t.dtype)]
            if p["dtype"] != dtype:
                raise ValueError(f"{where} has dtype {p['dtype']}, the schema {dtype}")
            for d, k in zip(t.dims, p["shape"], strict=True):
                if isinstance(k, int):
                    want_v = _maybe_value(d, values)
                    if want_v is not None and want_v != k:
                        raise ValueError(
                            f"{where}: dim {d.text} is {k} in the kernel, {want_v} here"
                        )
                elif d.text.isdigit():
                    raise ValueError(f"{where}: dim {d.text} is {k!r} in the kernel")
        for (name, ctype), p in zip(self.scalars, params[len(self.tensors) :], strict=True):
            if p["dtype"] != ctype:
                raise ValueError(f"{self.op}: scalar {name} is {p['dtype']}, the schema {ctype}")


def _shown(d: Dim, dims: Mapping[str, int]) -> str:
    """A dim's size as `describe` prints it: ``2 * 2048`` for a ``2*H`` dim (the structure)."""
    if d.factor > 1:
        return f"{d.factor} * {dims[d.name]}"
    return str(dims[d.name] if d.lead else d.value(dims))


def _maybe_value(d: Dim, values: Mapping[str, int]) -> int | None:
    try:
        return d.value(values) if not d.lead else values.get(d.name)
    except (KeyError, NameError, TypeError):
        return None


def _dtype_short(key: Mapping[str, str], var: str) -> str:
    """The short dtype of dtype variable `var` in a spec key ({"dtype": "bfloat16", ...})."""
    name = key.get("dtype") if var == "T" else key.get(var, key.get(var.lower()))
    for short, (attr, tvm) in LITERALS.items():
        if name in (short, attr, tvm):
            return short
    raise ValueError(f"no dtype for variable {var} in key {dict(key)}")


def _short(dtype: str, picked: Mapping[str, str]) -> str:
    return dtype if dtype in LITERALS else picked[dtype]


def _short_of(dtype: Any) -> str:
    name = str(dtype).removeprefix("torch.")
    for short, (attr, _) in LITERALS.items():
        if name == attr:
            return short
    raise TypeError(f"unsupported dtype {dtype}")


def _literal_dtype(name: str, t: Any, short: str) -> None:
    _validate.require_tensor(name, t)
    if str(t.dtype).removeprefix("torch.") != LITERALS[short][0]:
        raise TypeError(f"{name} has dtype {t.dtype}; it must be {LITERALS[short][0]}")


def _compile_launcher(schema: OpSchema) -> Callable:
    """Straight-line `launch` for `schema` (as dataclasses does: source text, then exec)."""
    tensors = [t.name for t in schema.tensors]
    scalars = [n for n, _ in schema.scalars]
    names = sorted({d.name for t in schema.tensors for d in t.dims if d.name} | _expr_names(schema))
    ptrs = ", ".join(f"{t}.data_ptr()" for t in tensors)
    flat = []
    for t in schema.tensors:
        for d in t.dims:
            if d.lead or (d.name and d.factor == 1):
                flat.append(d.name)
            elif d.name:
                flat.append(f"{d.factor} * {d.name}")
            else:
                flat.append(f"({d.text})")
    params = ", ".join(["handle", "device", "stream", *tensors, *scalars])
    src = (
        f"def launch({params}, *, {', '.join(names)}):\n"
        f"    _lib.native().launch(handle, device, stream, ({ptrs},), "
        f"({', '.join(flat)},), ({''.join(s + ', ' for s in scalars)}))\n"
    )
    scope: dict[str, Any] = {"_lib": _lib}
    exec(compile(src, f"<tileaot launch {schema.op}>", "exec"), scope)  # noqa: S102
    fn = scope["launch"]
    fn.__source__ = src
    return fn


def _expr_names(schema: OpSchema) -> set[str]:
    return {
        n
        for t in schema.tensors
        for d in t.dims
        if d.name is None and not d.text.isdigit()
        for n in _NAME.findall(d.text)
    }


def _compile_bind(schema: OpSchema) -> Callable:
    """Straight-line `bind` for `schema`: for a valid call, one condition per rule and no
    loops; on any failure it calls `bind_checked`, which raises the precise error."""
    lines, types, conds, picked, dims, present = [], [], [], {}, {}, []
    holder: dict[str, str] = {}
    for i, t in enumerate(schema.inputs):
        v = f"a{i}"
        lines.append(f"    {v} = args[{t.api!r}]")
        if t.optional:  # optional tensors: the generic path (rare in the ops with schemas)
            return schema.bind_checked
        present.append((t.api, v))
        types.append(f"type({v}) is A.Tensor")
        if t.dtype in LITERALS:
            conds.append(f"{v}.dtype is A._torch.{LITERALS[t.dtype][0]}")
        elif t.dtype in holder:
            conds.append(f"{v}.dtype is d{holder[t.dtype]}")
        else:
            holder[t.dtype] = str(i)
            picked[t.dtype] = f"k{i}"
            conds.insert(0, f"k{i} in {tuple(schema.dtypes[t.dtype])!r}")
            lines.append(
                f"    if not ({' and '.join(types)}):\n        return schema.bind_checked(args)"
            )
            types = []
            lines.append(f"    d{i} = {v}.dtype\n    k{i} = SHORT.get(d{i})")
    checks = []
    for i, t in enumerate(schema.inputs):
        v = f"a{i}"
        fixed = t.dims[1:] if t.lead else t.dims
        rank = f"len(s{i}) >= {len(fixed)}" if t.lead else f"len(s{i}) == {len(fixed)}"
        checks.append(f"    s{i} = {v}.shape")
        checks.append(f"    if not ({rank}):\n        return schema.bind_checked(args)")
        n = len(fixed)
        if t.lead and t.dims[0].name not in dims:
            dims[t.dims[0].name] = f"prod(s{i}[:len(s{i}) - {n}])"
            # the outputs' leading dims: the first ``*`` input's, as bind_checked takes them
            dims.setdefault("__lead__", f"s{i}[:len(s{i}) - {n}]")
        for j, d in enumerate(fixed):
            item = f"s{i}[{j - n}]" if t.lead else f"s{i}[{j}]"
            if d.text.isdigit():
                checks.append(
                    f"    if {item} != {d.text}:\n        return schema.bind_checked(args)"
                )  # noqa: E501
                continue
            if d.name is None:
                return schema.bind_checked
            size = item if d.factor == 1 else f"({item} // {d.factor})"
            if d.factor > 1:
                checks.append(
                    f"    if {item} % {d.factor}:\n        return schema.bind_checked(args)"
                )
            if d.name in dims:
                checks.append(
                    f"    if {size} != {d.name}:\n        return schema.bind_checked(args)"
                )
            else:
                dims[d.name] = size
                checks.append(f"    {d.name} = {size}")
    lead = dims.pop("__lead__", "()")
    for name, expr in dims.items():
        if expr.startswith("prod("):
            checks.append(f"    {name} = {expr}")
    names = ", ".join(repr(n) for n, _ in present)
    tensors = ", ".join(v for _, v in present)
    src = "def bind(args):\n" + "\n".join(lines) + "\n"
    test = " and ".join(types + conds) or "True"
    src += f"    if not ({test}):\n        return schema.bind_checked(args)\n"
    src += "\n".join(checks) + "\n"
    src += f"    device = check_memory(({names},), ({tensors},))\n"
    pick = ", ".join(f"{k!r}: {e}" for k, e in picked.items())
    dim = ", ".join(f"{k!r}: {k}" for k in dims)
    src += f"    return Bound({{{pick}}}, {{{dim}}}, device, {lead})\n"
    return _exec(src, schema, "bind")


def _exec(src: str, schema: OpSchema, name: str) -> Callable:
    from . import _arrays

    scope: dict[str, Any] = {
        "schema": schema,
        "Bound": Bound,
        "prod": math.prod,
        "check_memory": _validate.check_memory,
        "SHORT": _validate._SHORT,
        "A": _arrays,  # A.Tensor, A._torch: torch's, once the first torch tensor was seen
    }
    exec(compile(src, f"<tileaot {name} {schema.op}>", "exec"), scope)  # noqa: S102
    fn = scope[name]
    fn.__source__ = src
    return fn


def _compile_outputs(schema: OpSchema) -> Callable:
    """Straight-line `outputs` for `schema`: output shapes and dtypes from the bound sizes, the
    int32 check, then allocation or the `out=` checks (type, dtype, shape, device, layout via
    `_validate.check_out`, then overlap)."""
    outs = schema.outs
    names = sorted({d.name for t in schema.tensors for d in t.dims if d.name} | _expr_names(schema))
    lines = ["def outputs(fw, like, b, out, inputs):", "    dims = b.dims"]
    lines += [f"    {n} = dims.get({n!r})" for n in names]
    shapes, dtypes = [], []
    for i, t in enumerate(outs):
        own = [_size_expr(d) for d in (t.dims[1:] if t.lead else t.dims)]
        shape = (
            "(*b.lead, " + "".join(f"{e}, " for e in own) + ")"
            if t.lead
            else ("(" + "".join(f"{e}, " for e in own) + ")")
        )
        lines.append(f"    sh{i} = {shape}")
        if not any([d.text for d in x.dims] == [d.text for d in t.dims] for x in schema.inputs):
            # an output shaped as no input is: its size has not been checked yet
            lines.append(
                f"    if max(sh{i}, default=0) >= LIMIT or prod(sh{i}) >= LIMIT:\n"
                f"        check_size({t.name + ' (the output)'!r}, sh{i})"
            )
        dt = repr(t.dtype) if t.dtype in LITERALS else f"b.picked[{t.dtype!r}]"
        lines.append(f"    dt{i} = getattr(fw, ATTR[{dt}])")
        shapes.append(f"sh{i}")
        dtypes.append(f"dt{i}")
    made = ", ".join(f"like.new_empty(sh{i}, dtype=dt{i})" for i in range(len(outs)))
    lines.append(f"    if out is None:\n        return ({made},)")
    if len(outs) == 1:
        lines.append(f"    given = (out,)\n    names = ({outs[0].api!r},)")
    else:
        names = tuple(f"out[{i}] ({t.name})" for i, t in enumerate(outs))
        what = ", ".join(t.name for t in outs)
        lines.append(
            f"    if not isinstance(out, (tuple, list)) or len(out) != {len(outs)}:\n"
            f"        raise TypeError('out must be a ({what}) tuple of tensors; got ' "
            "+ type(out).__name__)"
        )
        lines.append(f"    given = tuple(out)\n    names = {names!r}")
    for i in range(len(outs)):
        lines.append(f"    check_out(names[{i}], given[{i}], dt{i}, sh{i}, b.device)")
    ins = tuple(t.api for t in schema.inputs)
    if any(t.optional for t in schema.inputs):
        lines.append("    ins = tuple(n for n, t in inputs.items() if t is not None)")
        lines.append("    check_no_overlap(names, given, ins, tuple(inputs[n] for n in ins))")
    else:
        vals = "".join(f"inputs[{n!r}], " for n in ins)
        lines.append(f"    check_no_overlap(names, given, {ins!r}, ({vals}))")
    lines.append("    return given")
    scope = {
        "LIMIT": _validate.INT32_LIMIT,
        "prod": math.prod,
        "check_size": _validate.check_size,
        "check_out": _validate.check_out,
        "check_no_overlap": _validate.check_no_overlap,
        "ATTR": {short: attr for short, (attr, _) in LITERALS.items()},
    }
    src = "\n".join(lines) + "\n"
    exec(compile(src, f"<tileaot outputs {schema.op}>", "exec"), scope)  # noqa: S102
    fn = scope["outputs"]
    fn.__source__ = src
    return fn


def _size_expr(d: Dim) -> str:
    """A dim as Python over the size names (the generated code's locals)."""
    if d.text.isdigit():
        return d.text
    if d.name is not None:
        return d.name if d.factor == 1 else f"{d.factor} * {d.name}"
    return f"({d.text})"
