"""A build's manifest.json, and the runtime's choice of variant replayed in Python.

`python -m tileaot check` needs no GPU and no native module: it reads the manifest the wheel
ships and asks what the runtime would run. `select` follows cpp/runtime/select.cpp (the
best-ranked arch that runs on the device first, PTX rows as TILEAOT_PTX says, then the first
row in table order that matches); `match` follows the generated match functions
(build_tools/emit_cpp.py: each dynamic size is bound at its first use as a whole dimension and
must fit an int32, every other dimension must equal its expression, then the divisibility
constraints must hold).
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._arch import Target, target

INT32_MAX = 2**31 - 1
# Operators that appear in shape patterns ("(M + 128 - 1) // 128", "2 * H", "E + 1").
_BINARY: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


@dataclass(frozen=True)
class Row:
    """One (variant, arch) row of the dispatch table."""

    name: str  # "rms_norm_bf16_n7168"
    op: str
    key: str  # "bf16"
    spec: str  # "n7168", or "any" for the generic variant
    target: Target
    constraints: dict[str, int]  # dynamic size -> required divisor
    dims: tuple[str, ...]  # every tensor's dims as written ("M", "7168", "N // 128"), flat

    @property
    def generic(self) -> bool:
        return self.spec == "any"


@dataclass(frozen=True)
class Manifest:
    path: str
    archs: tuple[str, ...]  # the build's targets ("sm_90a", ...)
    ops: tuple[str, ...]  # the build's ops filter ("*" = everything)
    rows: tuple[Row, ...]  # in dispatch-table order

    def group(self, op: str, key: str) -> list[Row]:
        """Rows of (op, key), in table order (what one `tileaot_lookup` handle covers)."""
        return [r for r in self.rows if r.op == op and r.key == key]

    def keys(self, op: str) -> list[str]:
        return list(dict.fromkeys(r.key for r in self.rows if r.op == op))


def default_path() -> Path:
    """The manifest the installed wheel ships beside this package."""
    return Path(__file__).with_name("manifest.json")


def load(path: str | Path | None = None) -> Manifest:
    """Read a manifest (default: the installed wheel's); FileNotFoundError says what to do."""
    path = Path(path) if path is not None else default_path()
    if not path.is_file():
        raise FileNotFoundError(
            f"no tileaot manifest at {path}: install the tileaot wheel (a source checkout has "
            "none), or pass --manifest <build>/gen/manifest.json"
        )
    data = json.loads(path.read_text())
    rows = tuple(_row(v) for v in data["variants"])
    return Manifest(str(path), tuple(data["archs"]), tuple(data["ops"]), rows)


def _row(variant: dict[str, Any]) -> Row:
    dims = tuple(d for p in variant["params"] if p["kind"] == "tensor" for d in p["shape_text"])
    return Row(
        name=variant["name"],
        op=variant["op"],
        key=variant["key"],
        spec=variant["spec"],
        target=target(variant["arch"]),
        constraints=dict(variant["constraints"]),
        dims=dims,
    )


def select(
    rows: Sequence[Row], major: int, minor: int, shapes: Sequence[int], ptx_mode: str = "auto"
) -> Row | None:
    """The row the runtime would launch on a device of compute capability major.minor, with
    TILEAOT_PTX set to `ptx_mode` (tileaot._arch.ptx_mode)."""
    usable = [r for r in rows if r.target.runs_on(major, minor, ptx_mode)]
    for rank in sorted({r.target.rank(ptx_mode) for r in usable}, reverse=True):
        for row in usable:
            if row.target.rank(ptx_mode) == rank and match(row, shapes) is not None:
                return row
    return None


def match(row: Row, shapes: Sequence[int]) -> dict[str, int] | None:
    """The dynamic sizes if `shapes` (all tensor dims, concatenated) fit `row`, else None."""
    if len(shapes) != len(row.dims):
        return None
    sizes: dict[str, int] = {}
    for text, value in zip(row.dims, shapes, strict=True):
        if text.isidentifier() and text not in sizes:
            if not 0 <= value <= INT32_MAX:
                return None
            sizes[text] = value
    try:
        if any(evaluate(t, sizes) != v for t, v in zip(row.dims, shapes, strict=True)):
            return None
    except ZeroDivisionError:
        return None
    if any(sizes.get(var, 0) % divisor for var, divisor in row.constraints.items()):
        return None
    return sizes


def evaluate(text: str, sizes: dict[str, int]) -> int:
    """Value of a shape expression of the manifest ("(M + 128 - 1) // 128") for `sizes`."""
    return _eval(_parse(text), sizes, text)


_PARSED: dict[str, ast.expr] = {}


def _parse(text: str) -> ast.expr:
    node = _PARSED.get(text)
    if node is None:
        node = _PARSED[text] = ast.parse(text, mode="eval").body
    return node


def _eval(node: ast.expr, sizes: dict[str, int], text: str) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name) and node.id in sizes:
        return sizes[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left, sizes, text), _eval(node.right, sizes, text)
        return _BINARY[type(node.op)](left, right)
    raise ValueError(f"cannot evaluate shape expression {text!r} of the manifest")
