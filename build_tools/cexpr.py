"""Print TIR integer expressions (grid sizes, TMA dims, derived shapes) as C++.

Only what TileLang puts into launch facts is supported; anything else is an error at build
time rather than a wrong launch at run time. All arithmetic is done in int64_t.
"""

from __future__ import annotations

from collections.abc import Callable

from tilelang import tvm

tirx = tvm.tirx

# floordiv/floormod differ from C's truncating / and % for negative operands; sizes are
# non-negative, but keep TIR's semantics exactly (helpers are defined in registry.cpp).
_BINARY = {
    tirx.Add: "({a} + {b})",
    tirx.Sub: "({a} - {b})",
    tirx.Mul: "({a} * {b})",
    tirx.Div: "({a} / {b})",
    tirx.Mod: "({a} % {b})",
    tirx.FloorDiv: "tl_floordiv({a}, {b})",
    tirx.FloorMod: "tl_floormod({a}, {b})",
    tirx.Min: "std::min<int64_t>({a}, {b})",
    tirx.Max: "std::max<int64_t>({a}, {b})",
    tirx.EQ: "({a} == {b})",
    tirx.NE: "({a} != {b})",
    tirx.LT: "({a} < {b})",
    tirx.LE: "({a} <= {b})",
    tirx.GT: "({a} > {b})",
    tirx.GE: "({a} >= {b})",
    tirx.And: "({a} && {b})",
    tirx.Or: "({a} || {b})",
}


def pystr(value) -> str:
    """A plain Python str of a TVM string or object.

    TVM's own string type subclasses str but keeps a handle to an FFI object; such values must
    not outlive tracing (they crash when freed late, and do not pickle)."""
    return str(value).encode().decode()


class UnsupportedExpr(ValueError):
    pass


def to_cpp(expr, name_of: Callable[[str], str]) -> str:
    """C++ text for `expr`; `name_of(var_name)` gives the C++ name of each variable."""
    if isinstance(expr, int):
        return f"int64_t({expr})"
    if isinstance(expr, tirx.IntImm):
        if expr.dtype == "bool":
            return "true" if expr.value else "false"
        return f"int64_t({expr.value})"
    if isinstance(expr, tirx.Var):
        return name_of(pystr(expr.name))
    if isinstance(expr, tirx.Cast):
        return to_cpp(expr.value, name_of)
    for cls, fmt in _BINARY.items():
        if type(expr) is cls:
            return fmt.format(a=to_cpp(expr.a, name_of), b=to_cpp(expr.b, name_of))
    if isinstance(expr, tirx.Not):
        return f"(!{to_cpp(expr.a, name_of)})"
    if isinstance(expr, tirx.Select):
        c, t, f = (to_cpp(e, name_of) for e in (expr.condition, expr.true_value, expr.false_value))
        return f"({c} ? {t} : {f})"
    raise UnsupportedExpr(f"cannot print {type(expr).__name__} as C++: {expr}")


def free_vars(expr) -> set[str]:
    """Names of the variables `expr` uses."""
    names: set[str] = set()

    def visit(node):
        if isinstance(node, tirx.Var):
            names.add(pystr(node.name))

    tirx.stmt_functor.post_order_visit(tirx.Evaluate(expr), visit)
    return names
