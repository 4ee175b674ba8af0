"""Every traced kernel signature against its op's schema (python/tileaot/<op>.py `SCHEMA`).

The kernel's `prim_func` is the authority on what it takes; the schema is what the Python layer,
the torch ops and the C++ header derive everything from. Checking each traced signature against
the schema at generate time means the two cannot drift: a renamed, reordered or re-typed kernel
parameter fails the build naming the op and the mismatch. Ops without a schema yet are skipped
(listed by `unchecked`). Kernels kept outside this repository (`build_tools wheel --kernels`)
carry their schema in their KernelSpec: ``extra={"schema": SCHEMA}``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

PYTHON = Path(__file__).resolve().parents[1] / "python"


def schema_of(op: str) -> Any | None:
    """The `SCHEMA` of op `op` in this checkout's python/tileaot (None if it has none)."""
    if str(PYTHON) not in sys.path:
        sys.path.insert(0, str(PYTHON))
    for name in (op, f"_{op}"):  # a kernel op served by a public op's helper module: `_op`
        try:
            module = importlib.import_module(f"tileaot.{name}")
        except ImportError:
            continue
        schema = getattr(module, "SCHEMA", None)
        if schema is not None and schema.op == op:
            return schema
    return None


def schema_for(spec: Any) -> Any | None:
    """The schema of a KernelSpec's op: its own (``extra["schema"]``), else tileaot.<op>'s."""
    return spec.extra.get("schema") or schema_of(spec.op)


def schemas_of(points: list, ops: set[str]) -> list:
    """The schemas of `ops` (by name), from the variants `points`, sorted by op; ops without
    one are left out. What a build's generated C++ (ops.hpp, workspace.cpp) is written from."""
    specs = {p.spec.op: p.spec for p in points}
    return [x for x in (schema_for(specs[op]) for op in sorted(ops)) if x]


def check_all(points: list, traced: dict) -> list[str]:
    """Check every traced (variant, arch) whose op has a schema; SystemExit on a mismatch.
    Returns the ops that have no schema (not checked)."""
    unchecked = set()
    for p in points:
        schema = schema_for(p.spec)
        if schema is None:
            unchecked.add(p.spec.op)
            continue
        for arch in p.archs:
            sig, _ = traced[(p.name, arch)]
            try:
                schema.check_signature(
                    sig["params"], p.key, p.specialisation, p.spec.key_string(p.key)
                )
            except ValueError as e:
                raise SystemExit(
                    f"tileaot: {p.name} ({arch}) does not match its schema: {e}"
                ) from None
    return sorted(unchecked)
