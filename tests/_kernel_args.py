"""What a launch of an op's kernel carries, in the kernel's order, taken from the op's schema.

Launch-argument tests name each tensor as the kernel should see it (``x`` viewed as ``[M, N]``):
that is their oracle (flattening, allocation, the size rules). The order of the pointers and of
the flat shapes is the schema's (`OpSchema.tensors`), read here rather than written again in
each test; the golden launch record (tests/test_golden_launches.py) checks that order on its own.
"""

from __future__ import annotations

import importlib
from typing import Any


def _schema(schema: Any) -> Any:
    """An `OpSchema`, or the one of kernel op `schema` (tileaot.<op>, or helper tileaot._<op>)."""
    if not isinstance(schema, str):
        return schema
    try:
        return importlib.import_module(f"tileaot.{schema}").SCHEMA
    except ImportError:
        return importlib.import_module(f"tileaot._{schema}").SCHEMA


def pointer(launch: Any, schema: Any, name: str) -> int:
    """The pointer `launch` passes for tensor `name` of `schema` (as `check_launch` takes it),
    found by the schema's kernel order rather than a position written in the test."""
    schema = _schema(schema)
    names = [t.name for t in schema.tensors]
    assert name in names, f"{schema.op} has no tensor {name!r}"
    before = schema.tensors[: names.index(name)]
    assert not any(t.optional for t in before), "an optional tensor before it: use check_launch"
    return launch.ptrs[len(before)]


def check_launch(launch: Any, schema: Any, **tensors: Any) -> dict[str, int]:
    """Assert that `launch` (a recorded `_fakes.Launch`) passes `tensors` in `schema`'s kernel
    order (an `OpSchema`, or the name of a kernel op whose module tileaot.<op> holds it): each
    by its schema name, a tensor (its data pointer and shape), or for a scratch tensor its shape
    alone (the workspace places it). Optional tensors left out are absent from the launch.
    Returns the scratch tensors' pointers by name, for checks of their placement."""
    schema = _schema(schema)
    names = [t.name for t in schema.tensors if t.name in tensors]
    unknown = set(tensors) - {t.name for t in schema.tensors}
    assert not unknown, f"{schema.op} has no tensor {sorted(unknown)}"
    missing = [t.name for t in schema.tensors if not t.optional and t.name not in tensors]
    assert not missing, f"name every tensor of {schema.op}; missing {missing}"
    assert len(launch.ptrs) == len(names), (launch.ptrs, names)
    shapes, scratch = [], {}
    for name, ptr in zip(names, launch.ptrs, strict=True):
        given = tensors[name]
        if isinstance(given, tuple):  # a scratch tensor's shape
            shapes += given
            scratch[name] = ptr
        else:
            assert ptr == given.data_ptr(), f"{name}: pointer {ptr}, want {given.data_ptr()}"
            shapes += given.shape
    assert launch.shapes == tuple(shapes)
    return scratch
