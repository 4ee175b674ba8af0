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
  The first input that mentions a name binds it; every later use must agree. An output's ``*M``
  takes the leading dims of the first ``*`` input; an output's ``*X`` of another name those of
  the first input with ``*X`` (``grad_w[*GW, H]`` is shaped as the weight ``w[*GW, H]``).
* a dtype is a dtype variable (its allowed short names in `dtypes`; the first input holding it
  picks the value, the others must match) or a literal: ``bf16 fp16 fp32 e4m3 u8 i32 i64`` (and,
  for ops that only move bits, ``e5m2 i8 i16 bool``).
* `key` formats the dispatch key from the dtype variables (and `extra` fields the wrapper passes).
* inputs may also use an expression over sizes bound before them (``x_scale[T, H // 128]``).
* an optional output follows an optional input: ``x_sorted_scale?[P, H // 128]: fp32 if x_scale``
  exists exactly when `x_scale` is given; `select` says which key's kernel takes an optional
  input: ``{"x_scale": ("X", "e4m3", None)}`` (the kernel of dtype variable X = e4m3 takes it,
  and bind requires it there and refuses it elsewhere), ``{"weights": ("mode", "weighted",
  "sum")}`` (key field `mode` is "weighted" with it, "sum" without).
* `sizes` are the rules for dims no input binds (``{"P": "T * K + E * (A - 1)"}``, ``{"P":
  "K + S"}``): the wrapper passes the public sizes they use (``bind(args, E=e, A=a)``), and
  `public` names those arguments (``{"E": "num_experts"}``) so that the torch fake reads them.
* `keyed` (optional): what a dispatch key fixes that no input binds, ``key -> {name: value}``:
  a size as an int or an expression over the bound sizes (``{"G": "N // 128"}`` for g128
  scales, ``{"G": 1}`` per token), a dtype variable as a short name (``{"S": "u8"}``). The
  checked path applies it with `fix`; `example_shapes`, the fake and `check_signature` read it.
* `key_of` (optional): the dispatch key of a call from its public arguments, unchecked (torch's
  fake sees no key); it may return ``(schema, key)`` for a call another schema serves.
* scratch tensors (``scratch work[T * K]: i32``) share one workspace the wrapper allocates
  (`workspace`): each starts on a 16-byte boundary; `workspace_size` is its size in bytes.
* `fields` names the spec-key field of a dtype variable where it is not ``T -> dtype`` (the
  build-time check reads the dtype there); `public` also names the public argument giving a
  dtype no input binds (for the torch fake); `order` is the public output order (``out=`` and
  the returned tuple) where it is not the kernel's; `backward` names the op computing the gradient.

From it come: the checked path's mechanical checks (`bind`: dtype by key, ranks, tied dims, device,
contiguity, alignment, int32 range; `outputs`: allocation or `out=` checks, overlap), the launch
(`launcher`: straight-line code generated once per op, the pointer tuple and flat shapes in the
kernel's order), the short path's tensor tuple and output bits (`writes`), the `info` example
(`example_shapes`), the torch custom-op schema text and fake (`torch_returns`, `fake`), and the
build-time check against the traced kernel (`check_signature`). Torch-free: `build_tools`
imports this module to check traces, and `import tileaot` must not import torch.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
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
    "i64": ("int64", "int64"),  # engram_hash's multipliers
    # dtypes only moved, never computed on (transpose serves them with the kernel of their width)
    "e5m2": ("float8_e5m2", "float8_e5m2"),
    "i8": ("int8", "int8"),
    "i16": ("int16", "int16"),
    "bool": ("bool", "bool"),
}
_TVM = {short: tvm for short, (_, tvm) in LITERALS.items()}
_ITEMSIZE = {
    "bf16": 2, "fp16": 2, "fp32": 4, "e4m3": 1, "u8": 1, "i32": 4, "i64": 8,
    "e5m2": 1, "i8": 1, "i16": 2, "bool": 1,
}  # fmt: skip
_BY_ATTR = {attr: short for short, (attr, _) in LITERALS.items()}
_NAME = re.compile(r"[A-Za-z_]\w*")
_NO_OPTIONAL: frozenset = frozenset()


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
        return int(eval(_code(self.text), {"__builtins__": {}}, dict(dims)))  # noqa: S307


@functools.cache
def _code(expr: str) -> Any:
    """A size expression of the grammar, compiled once (`Dim.value` runs on checked calls)."""
    return compile(expr, "<tileaot size>", "eval")


class Bound(NamedTuple):
    """What `OpSchema.bind` found: dtype variable -> short name, sizes, device, leading dims."""

    picked: dict[str, str]
    dims: dict[str, int]
    device: int
    lead: tuple  # the leading dims of the first ``*M`` input (the outputs' leading dims)
    # the leading dims of the first input of each other ``*X`` an output uses (`_out_leads`)
    leads: Mapping[str, tuple] = MappingProxyType({})


@dataclass(frozen=True)
class TensorSpec:
    name: str  # the kernel's parameter name
    dims: tuple[Dim, ...]
    dtype: str  # a dtype variable or a literal short name
    role: str  # "in", "out" or "scratch"
    optional: bool = False
    public: str | None = None  # the API's name where it differs (`out`)
    follows: str | None = None  # an optional output: the optional input it exists with

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
    m = re.fullmatch(
        r"\s*(\w+)(\?)?\s*\[(.*)\]\s*:\s*(\w+)\s*(?:as\s+(\w+))?\s*(?:if\s+(\w+))?\s*", text
    )
    if not m:
        raise ValueError(f"schema: cannot read tensor {text!r}")
    name, opt, dims, dtype, public, follows = m.groups()
    if role != "in" and bool(opt) != bool(follows):
        raise ValueError(f"schema: optional output {name} needs 'if <optional input>'")
    parsed = tuple(Dim.parse(d) for d in dims.split(",")) if dims.strip() else ()
    return TensorSpec(name, parsed, dtype, role, bool(opt), public, follows)


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
    keyed: Callable[[str], Mapping[str, int | str]] | None = None
    key_of: Callable[[Mapping[str, Any]], Any] | None = None
    tensors: tuple[TensorSpec, ...] = ()
    scalars: tuple[tuple[str, str], ...] = ()
    fields: Mapping[str, str] = field(default_factory=dict)  # dtype variable -> spec-key field
    sizes: Mapping[str, str] = field(default_factory=dict)  # dim no input binds -> its rule
    select: Mapping[str, tuple] = field(default_factory=dict)  # optional input -> key rule
    order: tuple[str, ...] = ()  # public output order (API names), if not the kernel's
    backward: str | None = None  # the op computing this op's gradient
    # size or dtype variable -> the public argument giving it ({"K": "k"}); a dtype variable's
    # is (argument, the dtype variable it defaults to when the argument is None)
    public: Mapping[str, Any] = field(default_factory=dict)

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
        # Optional inputs (API names) and the positions of all optional tensors (kernel order,
        # scratch excluded): which are given picks the outputs, the launch and the short path.
        self._inputs = tuple(t for t in self.tensors if t.role == "in")
        self._optional_at = tuple(i for i, t in enumerate(self._inputs) if t.optional)
        self._given_at = {  # (is each optional input given?) -> their names: no sets per call
            flags: frozenset(t.api for t, f in zip(opt, flags, strict=True) if f)
            for opt in [[self._inputs[i] for i in self._optional_at]]
            for flags in itertools.product((False, True), repeat=len(opt))
        }
        self._optional = tuple(t.api for t in self.tensors if t.role == "in" and t.optional)
        # `*X` names of outputs that are not the first `*` input's: their own leading dims
        first = next((t.dims[0].name for t in self._inputs if t.lead), None)
        self._out_leads = frozenset(
            t.dims[0].name for t in self.tensors if t.role == "out" and t.lead
        ) - {first}
        for name in self._out_leads:
            if not any(t.lead and t.dims[0].name == name for t in self._inputs):
                raise ValueError(f"schema {self.op}: no input has the leading dims *{name}")
        self._launch: dict[frozenset, Callable] = {}
        self._bind: Callable | None = None
        self._binds: dict[frozenset, Callable] = {}
        self._outputs: Callable | None = None
        self._outputs_by: dict[frozenset, Callable] = {}
        self._sizes: Callable | None = None
        self._workspace: Callable | None = None
        self._given_names = self.given_names()
        self._keyed: dict[str, tuple] = {}  # key -> what `keyed` fixes, parsed
        # The short path's output bits: bit i set for each tensor (kernel order) the kernel
        # writes. A plain attribute: the ops read it on every call.
        self.writes = sum(1 << i for i, t in enumerate(self.tensors) if t.role != "in")

    # ------------------------------------------------------------ derived facts
    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self._inputs

    @property
    def outs(self) -> tuple[TensorSpec, ...]:
        return tuple(t for t in self.tensors if t.role == "out")

    def present(self, given: frozenset = frozenset()) -> tuple[TensorSpec, ...]:
        """The tensors a kernel takes (kernel order, scratch included) when the optional inputs
        `given` (API names) are passed: the others and the outputs that follow them drop out."""
        return tuple(
            t
            for t in self.tensors
            if not t.optional or (t.api in given if t.role == "in" else t.follows in given)
        )

    def given_by_key(self, key: str) -> frozenset:
        """The optional inputs the kernels of dispatch key `key` ("bf16,fp32,weighted") take
        (by `select`; one without a rule: every key's)."""
        fields = self.key_fields(key)
        return frozenset(
            n
            for n in self._optional
            if n not in self.select or fields.get(self.select[n][0]) == self.select[n][1]
        )

    def _given_by_spec_key(self, key: Mapping[str, str]) -> frozenset:
        """`given_by_key` for a spec key ({"dtype": "float8_e4m3fn"}: what `build_tools` traces)."""
        given = set()
        for n in self._optional:
            rule = self.select.get(n)
            if rule is None:
                given.add(n)
                continue
            field, value = rule[0], rule[1]
            got = _dtype_short(key, field, self.fields) if field in self.dtypes else key.get(field)
            if got == value:
                given.add(n)
        return frozenset(given)

    def key_fields(self, key: str) -> dict[str, str]:
        """Dispatch key text -> its fields by the `key` format: "e4m3" -> {"X": "e4m3"}."""
        pattern, names = "", []
        for literal, name, _, _ in string.Formatter().parse(self.key):
            pattern += re.escape(literal)
            if name:
                pattern += r"([^,]*)"
                names.append(name)
        m = re.fullmatch(pattern, key)
        return dict(zip(names, m.groups(), strict=True)) if m else {}

    def complete(self, dims: Mapping[str, int]) -> dict[str, int]:
        """`dims` with the size rules (`sizes`) applied for the dims it lacks (a dict is
        completed in place)."""
        if self._sizes is None:
            self._sizes = _compile_sizes(self)
        return self._sizes(dims if type(dims) is dict else dict(dims))

    def flat(self, dims: Mapping[str, int], key: str | None = None) -> tuple[int, ...]:
        """The flat shapes the kernel takes: every dim of every tensor, in kernel order (of the
        kernels of `key`; every optional tensor if None)."""
        dims = self.complete(dict(dims))
        given = frozenset(self._optional) if key is None else self.given_by_key(key)
        return tuple(
            d.value(dims) if not d.lead else dims[d.name]
            for t in self.present(given)
            for d in t.dims
        )

    def describe(self, dims: Mapping[str, int], key: str | None = None) -> str:
        """A call's input matrices as text: ``x[4096, 7168]`` (what `info` and `check` print),
        then the sizes no input shows, by their public names (``, num_experts=256``)."""
        dims = self.complete(dict(dims))
        given = frozenset(self._optional) if key is None else self.given_by_key(key)
        shown = [t for t in self.present(given) if t.role == "in"]
        text = " ".join(
            f"{t.name}[{', '.join(_shown(d, dims) for d in t.dims)}]"
            for t in shown
            if len(t.dims) >= 2
        )
        bound = {n for t in shown for d in t.dims for n in _NAME.findall(d.text)}
        keyed = self.keyed(key) if self.keyed is not None and key is not None else {}
        extra = [n for n in self.given_names() if n not in bound and n not in keyed and n in dims]
        # named as the caller passes them: "num_experts=256" rather than "E=256"
        return text + "".join(f", {self.public.get(n, n)}={dims[n]}" for n in extra)

    def given_names(self) -> tuple[str, ...]:
        """The sizes no input binds and no rule gives: the wrapper passes them to `bind` (or a
        key fixes them: `keyed`)."""
        bound = {d.name for t in self.inputs for d in t.dims if d.name}
        used = [n for t in self.tensors for d in t.dims for n in _NAME.findall(d.text)]
        used += [n for e in self.sizes.values() for n in _NAME.findall(e)]
        return tuple(dict.fromkeys(n for n in used if n not in bound and n not in self.sizes))

    def example_shapes(self, key: str) -> tuple[str, tuple[int, ...]]:
        """A typical call for `python -m tileaot info`: its description and flat shapes, from
        the schema's `example` sizes (and what `keyed` fixes for `key`)."""
        dims, _ = self.key_facts(key, self.example)
        return self.describe(dims, key), self.flat(dims, key)

    def key_facts(self, key: str | None, dims: Mapping[str, Any]) -> tuple[dict, dict]:
        """`dims` plus the sizes `keyed` fixes for `key`, and the dtype variables it fixes."""
        sizes, picked = dict(dims), {}
        if self.keyed is not None and key is not None:
            facts = self._keyed.get(key)
            if facts is None:  # parsed once per key: the checked path calls this every time
                facts = self._keyed[key] = tuple(
                    (n, v if n in self.dtypes or not isinstance(v, str) else Dim.parse(v))
                    for n, v in self.keyed(key).items()
                )
            for name, v in facts:
                if name in self.dtypes:
                    picked[name] = v
                else:
                    sizes[name] = v.value(sizes) if isinstance(v, Dim) else v
        return sizes, picked

    def fix(self, bound: Bound, key: str) -> None:
        """Add what `keyed` fixes for dispatch key `key` to a checked call's `bound` (its
        output-only sizes and dtypes), so that `outputs` and `launch` see them."""
        dims, picked = self.key_facts(key, bound.dims)
        bound.dims.update(dims)
        bound.picked.update(picked)

    def writes_of(self, given: frozenset = frozenset()) -> int:
        """The short path's output bits for a call with the optional inputs `given`: bit i for
        each output among the tensors it passes (kernel order, no scratch)."""
        tensors = [t for t in self.present(given) if t.role != "scratch"]
        return sum(1 << i for i, t in enumerate(tensors) if t.role == "out")

    # ------------------------------------------------------------ scratch
    @property
    def scratch(self) -> tuple[TensorSpec, ...]:
        return tuple(t for t in self.tensors if t.role == "scratch")

    def workspace_layout(self) -> tuple[list[str], str]:
        """Byte offsets of the scratch tensors in the workspace and its total size, as integer
        expressions over the size names (Python; C++ with ``/`` for ``//``): each tensor starts
        on a 16-byte boundary (the runtime's alignment rule, as if each were its own tensor)."""
        offsets, end = [], "0"
        for t in self.scratch:
            start = end if end == "0" else f"({end} + 15) // 16 * 16"
            offsets.append(start)
            size = " * ".join([f"({_size_expr(d)})" for d in t.dims] + [str(_ITEMSIZE[t.dtype])])
            end = size if start == "0" else f"{start} + {size}"
        return offsets, end

    def workspace_size(self, dims: Mapping[str, int]) -> int:
        """Bytes of scratch a call of sizes `dims` needs (0 for an op without scratch)."""
        if self._workspace is None:
            self._workspace = _lambda(self.workspace_layout()[1], f"workspace {self.op}")
        return self._workspace(dims)

    def workspace(self, fw: Any, like: Any, dims: Mapping[str, int]) -> Any:
        """The scratch of one call: `workspace_size` bytes allocated like `like`."""
        return like.new_empty(self.workspace_size(dims), dtype=fw.uint8)

    # ------------------------------------------------------------ the checked path
    def bind(self, args: Mapping[str, Any], **given: int) -> Bound:
        """Check the input tensors (`args`: API name -> tensor or None for optional ones):
        dtypes, ranks, tied dims, then device and layout. Raises TypeError/ValueError naming
        the argument. `given`: the sizes no input binds (`given_names`, from the public
        scalars); the size rules (`sizes`) are applied after (without `given`, only where
        they need none: see `complete`).

        Straight-line code generated for this schema (`_compile_bind`) checks a valid call with
        one condition per rule; any failure reruns `bind_checked`, the rule-by-rule version
        that works out which rule broke and says so."""
        if self._optional:  # the code for the optional inputs given
            opt = self._given_at[tuple(args[n] is not None for n in self._optional)]
            fn = self._binds.get(opt)
            if fn is None:
                fn = self._binds[opt] = _compile_bind(self, opt)
        else:
            fn = self._bind
            if fn is None:
                fn = self._bind = _compile_bind(self)
        b = fn(args)
        # b.dims is this call's own dict. Rules over sizes the wrapper passes wait for them: a
        # wrapper that checks its public arguments after `bind` adds them, then `complete`s.
        if given or (self.sizes and not self._given_names):
            b.dims.update(given)
            self.complete(b.dims)
        return b

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
                picked[spec.dtype] = _pick_dtype(spec.api, t, self.dtypes[spec.dtype])
                first[spec.dtype] = (spec.api, t)
        self._check_selected(args, picked, first)
        dims: dict[str, int] = {}
        binder: dict[str, tuple[str, tuple]] = {}
        present = []
        lead = None
        leads: dict[str, tuple] = {}
        for spec in self.inputs:
            t = args[spec.api]
            if t is None:
                continue
            present.append((spec.api, t))
            shape = tuple(t.shape)
            self._bind_dims(spec, shape, dims, binder)
            if spec.lead and lead is None:
                lead = shape[: len(shape) - len(spec.dims) + 1]
            if spec.lead and spec.dims[0].name in self._out_leads:
                leads.setdefault(spec.dims[0].name, shape[: len(shape) - len(spec.dims) + 1])
        names, tensors = zip(*present, strict=True)
        device = _validate.check_memory(names, tensors)
        return Bound(picked, dims, device, lead or (), leads or Bound._field_defaults["leads"])

    def _check_selected(self, args: Mapping[str, Any], picked: dict, first: dict) -> None:
        """An optional input that a dtype selects (``select = {"x_scale": ("X", "e4m3",
        None)}``) is required with that dtype and refused with any other."""
        for name, (var, value, *_) in self.select.items():
            if var not in picked:
                continue
            holder, t = first[var]
            attr = LITERALS[value][0]
            spec = next(s for s in self.inputs if s.api == name)
            if picked[var] == value and args[name] is None:
                raise ValueError(
                    f"{holder} has dtype {t.dtype}: pass {name} {spec.pattern()} with it"
                )
            if picked[var] != value and args[name] is not None:
                raise ValueError(
                    f"{name} is only for {holder} of dtype {attr}; {holder} has dtype {t.dtype}"
                )

    def _bind_dims(self, spec: TensorSpec, shape: tuple, dims: dict, binder: dict) -> None:
        fixed = spec.dims[1:] if spec.lead else spec.dims
        if len(shape) < len(fixed) if spec.lead else len(shape) != len(fixed):
            got = "a 0-d tensor" if not shape else f"shape {shape}"
            # The sizes other tensors bound are filled in: "weight must have shape (64,)".
            raise ValueError(f"{spec.api} must have shape {self._expected(spec, dims)}; got {got}")
        tail = shape[len(shape) - len(fixed) :]
        before = dict(dims)  # what other tensors bound: the sizes a message may fill in
        if spec.lead:  # the leading dims' product binds (or must equal) the *M size
            name, rows = spec.dims[0].name, math.prod(shape[: len(shape) - len(fixed)])
            if dims.setdefault(name, rows) != rows:
                by, by_shape = binder.get(name, (None, None))
                by_spec = next((s for s in self.inputs if s.api == by and s.lead), None)
                # that tensor's leading dims, then this one's own: "(4, NG)" for scale of q (4, 16)
                lead = ["..."]
                if by_spec is not None:
                    lead = by_shape[: len(by_shape) - len(by_spec.dims) + 1]
                filled = [
                    d.text if _maybe_value(d, before) is None else str(d.value(before))
                    for d in fixed
                ]
                parts = [*map(str, lead), *filled]
                want = f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"
                match = f" to match {by} {by_shape}" if by else ""
                raise ValueError(
                    f"{spec.api} must have shape {want}{match} (leading dims of {dims[name]} "
                    f"elements); got {shape}"
                )
            binder.setdefault(name, (spec.api, shape))
        for i, (d, v) in enumerate(zip(fixed, tail, strict=True)):
            axis = i - len(fixed) if spec.lead else i
            if d.text.isdigit():
                if v != int(d.text):
                    raise ValueError(
                        f"{spec.api} must have shape {spec.pattern()}: its dim {axis} is {v}, "
                        f"not {d.text}"
                    )
                continue
            if d.name is None:  # an expression over sizes bound before: x_scale[T, H // 128]
                want = _maybe_value(d, dims)
                if want is None:
                    raise ValueError(f"schema {self.op}: input dim {d.text!r} binds no size")
                if v != want:
                    by = binder.get(_NAME.findall(d.text)[0], (None, None))
                    match = f" to match {by[0]} {by[1]}" if by[0] else ""
                    raise ValueError(
                        f"{spec.api} must have shape {self._expected(spec, before)}{match}; "
                        f"got {shape}"
                    )
                continue
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
                match = f" to match {by} {by_shape}" if by and by != spec.api else ""
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

    def out_shape(
        self,
        spec: TensorSpec,
        dims: Mapping[str, int],
        lead: tuple,
        leads: Mapping[str, tuple] = MappingProxyType({}),
    ) -> tuple:
        """An output's public shape: the leading dims of the inputs (`lead`, or for an output's
        own ``*X`` those in `leads`), then its own."""
        own = tuple(d.value(dims) for d in (spec.dims[1:] if spec.lead else spec.dims))
        if not spec.lead:
            return own
        return (*leads.get(spec.dims[0].name, lead), *own)

    def outputs(self, fw: Any, like: Any, b: Bound, out: Any, inputs: Mapping[str, Any]) -> tuple:
        """The output tensors: allocated like `like` (its framework and device), or `out=`
        checked (type, dtype, shape, device, layout, no overlap with inputs or each other)."""
        if self._outputs is None:
            self._outputs = (
                self._outputs_given if self._optional else _compile_outputs(self, frozenset())
            )
        return self._outputs(fw, like, b, out, inputs)

    def _outputs_given(self, fw: Any, like: Any, b: Bound, out: Any, inputs: Mapping) -> tuple:
        """`outputs` of a schema with optional inputs: the code for those given."""
        given = self._given_at[tuple(inputs[n] is not None for n in self._optional)]
        fn = self._outputs_by.get(given)
        if fn is None:
            fn = self._outputs_by[given] = _compile_outputs(self, given)
        return fn(fw, like, b, out, inputs)

    # ------------------------------------------------------------ the launch
    def launcher(self, given: frozenset = frozenset()) -> Callable:
        """``launch(handle, device, stream, *tensors, [workspace,] *scalars, dims)``: one
        `_C.launch` with the data pointers and flat shapes in kernel order, as straight-line
        code (generated once per set of optional inputs `given`; no loops or lookups on the
        hot path). `tensors` are every non-scratch tensor in kernel order (None for an absent
        optional one); `workspace` (ops with scratch) holds the scratch tensors."""
        fn = self._launch.get(given)
        if fn is None:
            fn = self._launch[given] = _compile_launcher(self, given)
        return fn

    def launch(self, key: str, device: int, tensors: tuple, scalars: tuple, dims: dict) -> int:
        """Look up (op, key) and launch on the current stream; returns the handle."""
        handle = _lib.handle(self.op, key)
        given = _NO_OPTIONAL
        if self._optional:  # which optional inputs the call passes (kernel positions)
            given = self._given_at[tuple(tensors[i] is not None for i in self._optional_at)]
        self.launcher(given)(handle, device, _lib.current_stream(device), *tensors, *scalars, dims)
        return handle

    # ------------------------------------------------------------ torch and the build
    def public_outs(self) -> tuple[TensorSpec, ...]:
        """The outputs in the public order (``out=`` and the returned tuple)."""
        if not self.order:
            return self.outs
        return tuple(sorted(self.outs, key=lambda t: self.order.index(t.api)))

    def torch_outs(self) -> tuple[str, ...]:
        """Output names of the torch custom op (the `_out` op's arguments; "name?" may be
        None: an optional output)."""
        return tuple(s.api + "?" * s.optional for s in self.public_outs())

    def fake(
        self,
        inputs: Mapping[str, Any],
        fw: Any,
        key: str | None = None,
        args: Mapping[str, Any] = {},  # noqa: B006
    ) -> tuple:
        """Empty stand-ins of the outputs for torch's fake tensors (symbolic sizes welcome):
        shapes from the inputs' dims, the public arguments `args` (`public`, then the `sizes`
        rules) and what `keyed` fixes for `key`; dtypes from the schema; None for an optional
        output whose input is absent; no checks."""
        picked: dict[str, str] = {}
        dims: dict[str, Any] = {}
        lead: tuple = ()
        leads: dict[str, tuple] = {}
        like = None
        for spec in self.inputs:
            t = inputs[spec.api]
            if t is None:
                continue
            like = like if like is not None else t
            if spec.dtype not in LITERALS and spec.dtype not in picked:
                picked[spec.dtype] = short_of(t.dtype)
            shape = tuple(t.shape)
            fixed = spec.dims[1:] if spec.lead else spec.dims
            tail = shape[len(shape) - len(fixed) :]
            if spec.lead and spec.dims[0].name in self._out_leads:
                leads.setdefault(spec.dims[0].name, shape[: len(shape) - len(fixed)])
            if spec.lead and not lead:
                lead = shape[: len(shape) - len(fixed)]
                dims.setdefault(spec.dims[0].name, math.prod(lead))
            for d, v in zip(fixed, tail, strict=True):
                if d.name is not None:
                    dims.setdefault(d.name, v // d.factor)
        for name, arg in self.public.items():
            if name in self.dtypes:  # (argument, the dtype variable it defaults to)
                value = args.get(arg[0])
                picked[name] = picked[arg[1]] if value is None else short_of(value)
            else:
                dims[name] = args[arg]
        dims, fixed_dtypes = self.key_facts(key, dims)
        picked.update(fixed_dtypes)
        dims = self.complete(dims)
        given = frozenset(n for n in self._optional if inputs.get(n) is not None)
        return tuple(
            None
            if s.optional and s.follows not in given
            else like.new_empty(
                self.out_shape(s, dims, lead, leads),
                dtype=getattr(fw, LITERALS[_short(s.dtype, picked)][0]),
            )
            for s in self.public_outs()
        )

    def check_signature(
        self,
        params: list[dict],
        key: Mapping[str, str],
        spec: Mapping,
        key_string: str | None = None,
    ) -> None:
        """Compare a traced kernel signature (`build_tools.trace.Signature.params` as dicts)
        with the schema: names, order, kinds, ranks, dtypes for this key, and every fixed or
        specialised dim. `key_string` is the key's dispatch-key string (`KernelSpec.key_string`;
        by default spelled from `key`). ValueError naming the op and the first mismatch."""
        tensors = self.present(self._given_by_spec_key(key))
        want = [(t.name, "tensor") for t in tensors] + [(n, "scalar") for n, _ in self.scalars]
        got = [(p["name"], p["kind"]) for p in params]
        if want != got:
            raise ValueError(f"{self.op}: kernel parameters {got} differ from the schema's {want}")
        values = {**{k: v for k, v in spec.items() if isinstance(v, int)}}
        fixed = {} if self.keyed is None else self.keyed(key_string or _key_string(key))
        for name, v in fixed.items():
            if name not in self.dtypes:  # a size: known where it is a number or its names are
                size = _maybe_value(Dim.parse(v), values) if isinstance(v, str) else v
                if size is not None:
                    values[name] = size
        for t, p in zip(tensors, params, strict=False):
            where = f"{self.op} ({dict(key)}, {dict(spec) or 'generic'}): tensor {t.name}"
            if len(p["shape"]) != len(t.dims):
                raise ValueError(f"{where} has rank {len(p['shape'])}, the schema {len(t.dims)}")
            short = t.dtype if t.dtype in LITERALS else fixed.get(t.dtype)
            if short not in _TVM:
                short = _dtype_short(key, t.dtype, self.fields)
            dtype = _TVM[short]
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
        for (name, ctype), p in zip(self.scalars, params[len(tensors) :], strict=True):
            if p["dtype"] != ctype:
                raise ValueError(f"{self.op}: scalar {name} is {p['dtype']}, the schema {ctype}")
        # `key` spells the dispatch key (the C++ header builds it so): it must be the kernel's.
        fields = {}
        for _, name, _, _ in string.Formatter().parse(self.key):
            if name in self.dtypes:
                fields[name] = fixed.get(name) or _dtype_short(key, name, self.fields)
            elif name:
                fields[name] = _BY_ATTR.get(key.get(name), key.get(name))
        spelled, want_key = self.key.format(**fields), key_string or _key_string(key)
        if spelled != want_key:
            raise ValueError(
                f"{self.op}: the schema's key {self.key!r} spells {spelled!r} for the kernel's "
                f"key {want_key!r}"
            )


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


def _dtype_short(key: Mapping[str, str], var: str, fields: Mapping[str, str] = {}) -> str:  # noqa: B006
    """The short dtype of dtype variable `var` in a spec key ({"dtype": "bfloat16", ...})."""
    if var in fields:
        name = key.get(fields[var])
    else:
        name = key.get("dtype") if var == "T" else key.get(var, key.get(var.lower()))
    for short, (attr, tvm) in LITERALS.items():
        if name in (short, attr, tvm):
            return short
    raise ValueError(f"no dtype for variable {var} in key {dict(key)}")


def _key_string(key: Mapping[str, str]) -> str:
    """A spec key's dispatch-key string ("bf16,g128"), as kernels_py.spec.KernelSpec spells it."""
    return ",".join(_BY_ATTR.get(v, v) for v in key.values())


def _pick_dtype(name: str, t: Any, supported: tuple[str, ...]) -> str:
    """The short dtype name of tensor `t`, which must be one of `supported` (as
    `_validate.dtype_key` says it, for any literal dtype)."""
    _validate.require_tensor(name, t)
    short = _BY_ATTR.get(str(t.dtype).removeprefix("torch."))
    if short not in supported:
        prefix = "" if type(t) is _validate.Array else "torch."
        names = ", ".join(prefix + LITERALS[k][0] for k in supported)
        raise TypeError(f"{name} has dtype {t.dtype}; supported dtypes: {names}")
    return short


class _ShortNames(dict):
    """dtype object (torch's or DLPack's) -> short name, or None; filled on first sight."""

    def __missing__(self, dtype: Any) -> str | None:
        short = self[dtype] = _BY_ATTR.get(str(dtype).removeprefix("torch."))
        return short


def _short(dtype: str, picked: Mapping[str, str]) -> str:
    return dtype if dtype in LITERALS else picked[dtype]


def short_of(dtype: Any) -> str:
    """The short name of a torch or DLPack dtype ("bf16"); TypeError for one not in LITERALS."""
    short = _BY_ATTR.get(str(dtype).removeprefix("torch."))
    if short is None:
        raise TypeError(f"unsupported dtype {dtype}")
    return short


def _literal_dtype(name: str, t: Any, short: str) -> None:
    _validate.require_tensor(name, t)
    if str(t.dtype).removeprefix("torch.") != LITERALS[short][0]:
        prefix = "" if type(t) is _validate.Array else "torch."
        raise TypeError(f"{name} has dtype {t.dtype}; it must be {prefix}{LITERALS[short][0]}")


def _compile_launcher(schema: OpSchema, given: frozenset) -> Callable:
    """Straight-line `launch` for `schema` (as dataclasses does: source text, then exec)."""
    tensors = [t.name for t in schema.tensors if t.role != "scratch"]
    present = schema.present(given)
    scalars = [n for n, _ in schema.scalars]
    scratch = schema.scratch
    offsets = schema.workspace_layout()[0]
    # With scratch: an empty tensor's NULL data pointer (which the runtime refuses) is passed
    # as the workspace's; a kernel gets no work on an empty tensor and never touches it.
    ptrs = [
        f"({t.name}.data_ptr() or w)" if scratch else f"{t.name}.data_ptr()"
        for t in present
        if t.role != "scratch"
    ]
    ptrs += ["w" if o == "0" else f"w + {o}" for o in offsets]
    flat = []
    for t in present:
        for d in t.dims:
            if d.lead or (d.name and d.factor == 1):
                flat.append(d.name)
            elif d.name:
                flat.append(f"{d.factor} * {d.name}")
            else:
                flat.append(f"({d.text})")
    params = ", ".join(
        ["handle", "device", "stream", *tensors, *(["workspace"] if scratch else []), *scalars]
    )
    used = sorted(
        {n for f in flat for n in _NAME.findall(f)} | {n for o in offsets for n in _NAME.findall(o)}
    )
    src = f"def launch({params}, dims):\n" + "".join(f"    {n} = dims[{n!r}]\n" for n in used)
    if scratch:
        src += "    w = workspace.data_ptr()\n"
    src += (
        f"    _lib.native().launch(handle, device, stream, ({', '.join(ptrs)},), "
        f"({', '.join(flat)},), ({''.join(s + ', ' for s in scalars)}))\n"
    )
    return _exec_src(src, {"_lib": _lib}, f"launch {schema.op}", "launch")


def _exec_src(src: str, scope: dict, where: str, name: str) -> Callable:
    exec(compile(src, f"<tileaot {where}>", "exec"), scope)  # noqa: S102
    fn = scope[name]
    fn.__source__ = src
    return fn


def _lambda(expr: str, where: str) -> Callable:
    """``dims -> int(expr)`` over the size names in `expr`, compiled once (straight-line)."""
    body = "".join(f"    {n} = dims[{n!r}]\n" for n in sorted(set(_NAME.findall(expr))))
    return _exec_src(f"def f(dims):\n{body}    return {expr}\n", {}, where, "f")


def _compile_sizes(schema: OpSchema) -> Callable:
    """``dims -> dims`` with each size rule applied where `dims` lacks the size."""
    lines = ["def sizes(dims):"]
    for name, expr in schema.sizes.items():
        lines.append(f"    if {name!r} not in dims:")
        lines += [f"        {n} = dims[{n!r}]" for n in sorted(set(_NAME.findall(expr)))]
        lines.append(f"        dims[{name!r}] = {expr}")
    lines.append("    return dims")
    return _exec_src("\n".join(lines) + "\n", {}, f"sizes {schema.op}", "sizes")


def _size_names(schema: OpSchema) -> list[str]:
    return sorted({d.name for t in schema.tensors for d in t.dims if d.name} | _expr_names(schema))


def _described(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__


def _expr_names(schema: OpSchema) -> set[str]:
    return {
        n
        for t in schema.tensors
        for d in t.dims
        if d.name is None and not d.text.isdigit()
        for n in _NAME.findall(d.text)
    }


def _compile_bind(schema: OpSchema, given: frozenset = frozenset()) -> Callable:
    """Straight-line `bind` for `schema` called with the optional inputs `given`: for a valid
    call, one condition per rule and no loops; on any failure it calls `bind_checked`, which
    raises the precise error."""
    lines, types, conds, picked, dims, present = [], [], [], {}, {}, []
    holder: dict[str, str] = {}
    leads: dict[str, str] = {}  # an output's own *X -> the leading dims (code) giving it
    ins = [t for t in schema.inputs if not t.optional or t.api in given]
    for i, t in enumerate(ins):
        v = f"a{i}"
        lines.append(f"    {v} = args[{t.api!r}]")
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
            lines.append(f"    d{i} = {v}.dtype\n    k{i} = SHORT[d{i}]")
    for name, (var, value, *_) in schema.select.items():  # x_scale iff X is e4m3
        if var in picked:
            conds.append(f"{picked[var]} {'==' if name in given else '!='} {value!r}")
    checks = []
    for i, t in enumerate(ins):
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
        elif t.lead:  # a size bound before: these leading dims must match it
            checks.append(
                f"    if prod(s{i}[:len(s{i}) - {n}]) != {dims[t.dims[0].name]}:\n"
                "        return schema.bind_checked(args)"
            )
        if t.lead and t.dims[0].name in schema._out_leads and t.dims[0].name not in leads:
            leads[t.dims[0].name] = f"s{i}[:len(s{i}) - {n}]"  # an output's own *X: these
        for j, d in enumerate(fixed):
            item = f"s{i}[{j - n}]" if t.lead else f"s{i}[{j}]"
            if d.text.isdigit():
                checks.append(
                    f"    if {item} != {d.text}:\n        return schema.bind_checked(args)"
                )  # noqa: E501
                continue
            if d.name is None:  # an expression over sizes bound (as locals) before
                names = _NAME.findall(d.text)
                if not all(n in dims and not dims[n].startswith("prod(") for n in names):
                    return schema.bind_checked
                checks.append(
                    f"    if {item} != ({d.text}):\n        return schema.bind_checked(args)"
                )
                continue
            size = item if d.factor == 1 else f"({item} // {d.factor})"
            if d.factor > 1:
                checks.append(
                    f"    if {item} % {d.factor}:\n        return schema.bind_checked(args)"
                )
            if d.name in dims:  # its binding expression: a *M size is assigned only at the end
                checks.append(
                    f"    if {size} != {dims[d.name]}:\n        return schema.bind_checked(args)"
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
    own = ", {" + ", ".join(f"{k!r}: {e}" for k, e in leads.items()) + "}" if leads else ""
    src += f"    return Bound({{{pick}}}, {{{dim}}}, device, {lead}{own})\n"
    return _exec(src, schema, "bind")


def _exec(src: str, schema: OpSchema, name: str) -> Callable:
    from . import _arrays

    scope: dict[str, Any] = {
        "schema": schema,
        "Bound": Bound,
        "prod": math.prod,
        "check_memory": _validate.check_memory,
        "SHORT": _ShortNames(),
        "A": _arrays,  # A.Tensor, A._torch: torch's, once the first torch tensor was seen
    }
    exec(compile(src, f"<tileaot {name} {schema.op}>", "exec"), scope)  # noqa: S102
    fn = scope[name]
    fn.__source__ = src
    return fn


def _compile_outputs(schema: OpSchema, given: frozenset) -> Callable:
    """Straight-line `outputs` for `schema` called with the optional inputs `given`: output
    shapes and dtypes from the bound sizes, the int32 check, then allocation or the `out=`
    checks (type, dtype, shape, device, layout via `_validate.check_out`, then overlap), in the
    public output order."""
    outs = [t for t in schema.present(given) if t.role == "out"]
    if schema.order:
        outs.sort(key=lambda t: schema.order.index(t.api))
    names = _size_names(schema)
    lines = ["def outputs(fw, like, b, out, inputs):", "    dims = b.dims"]
    lines += [f"    {n} = dims.get({n!r})" for n in names]
    shapes, dtypes = [], []
    for i, t in enumerate(outs):
        own = [_size_expr(d) for d in (t.dims[1:] if t.lead else t.dims)]
        lead = "b.lead"
        if t.lead and t.dims[0].name in schema._out_leads:  # its own *X: that input's
            lead = f"b.leads[{t.dims[0].name!r}]"
        shape = (
            f"(*{lead}, " + "".join(f"{e}, " for e in own) + ")"
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
            "+ _described(out))"
        )
        lines.append(f"    given = tuple(out)\n    names = {names!r}")
    for i in range(len(outs)):
        lines.append(f"    check_out(names[{i}], given[{i}], dt{i}, sh{i}, b.device)")
    ins = tuple(t.api for t in schema.inputs if not t.optional or t.api in given)
    vals = "".join(f"inputs[{n!r}], " for n in ins)
    lines.append(f"    check_no_overlap(names, given, {ins!r}, ({vals}))")
    lines.append("    return given")
    scope = {
        "LIMIT": _validate.INT32_LIMIT,
        "prod": math.prod,
        "check_size": _validate.check_size,
        "check_out": _validate.check_out,
        "check_no_overlap": _validate.check_no_overlap,
        "_described": _described,
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
