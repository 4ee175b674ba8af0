"""`python -m build_tools wheel --kernels MODULE --config FILE [--name PKG]`: a wheel of your own
kernels, kept outside this repository.

MODULE (a module name on PYTHONPATH, or the path of a module or package folder) exposes
``all_specs()``, as kernels_py does: one `KernelSpec` per op whose ``extra={"schema": SCHEMA}``
is the op's `OpSchema` (tileaot/_schema.py), and whose optional ``doc`` starts the function's
docstring. The config (bring-your-shapes TOML, build_tools/userconfig.py) picks archs, ops,
dtypes and sizes as for tileaot's own ops.

The wheel is self-contained: package PKG holds its own native library, ``lib<PKG>.so`` built from
the same runtime sources as tileaot's (cpp/runtime, cpp/bindings) with the user's kernels
embedded, a ``_C`` module in a nanobind domain of its own, and a copy of tileaot's op-agnostic
Python runtime (`runtime_modules`). It does not depend on an installed tileaot wheel: nothing ties
its registry to one tileaot version, and both load side by side (their libraries have
different sonames; each ``_C`` binds to its own). Each op is a `schema_op` function (the
checks, allocation, short path and launch derived from its schema), ``PKG.register_torch_ops()``
registers ``torch.ops.PKG.<op>`` and ``<op>_out``, and ``PKG/include/tileaot/ops.hpp`` declares
``tileaot::<op>(stream, ...)`` for C++ (link ``PKG/lib/libPKG.so``).

The package is staged under build/ext/PKG/ (a pyproject whose CMake project is this
repository's CMakeLists.txt, with TILEAOT_SPECS / TILEAOT_PACKAGE set), then built like
tileaot's own wheel: offline, without build isolation, traces cached.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import keyword
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / "python" / "tileaot"
# What the generated package runs on: these modules of tileaot and every module they import
# (`runtime_modules`), copied in; all of them are op-agnostic and import relatively.
RUNTIME_ROOTS = ("_schema_op", "_schema_torch")
# Names the generated package defines itself: no op may take them.
_RESERVED = {"register_torch_ops", "torch_ops", "VariantMissError", "DriverError"}


class ExtError(ValueError):
    """A kernels module, config or name that cannot be built; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class Op:
    schema: object  # tileaot._schema.OpSchema
    doc: str


def resolve_module(value: str) -> tuple[str, Path | None]:
    """`--kernels` as (module name, folder to put on the path): a dotted name is imported as it
    is; a path (``examples/external_kernels/my_kernels``, ``.../ops.py``) from its parent."""
    path = Path(value)
    if os.sep in value or value.endswith(".py") or path.exists():
        if not path.exists():
            raise ExtError(f"--kernels {value}: no such file or folder")
        path = path.resolve()
        return (path.stem if path.is_file() else path.name), path.parent
    return value, None


def load_ops(module: str, config: str | None) -> list[Op]:
    """The ops of `module` (narrowed by `config`: CMake reads its archs) with their schemas."""
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise ExtError(
            f"--kernels {module}: cannot import it ({e}); give a module on PYTHONPATH or the "
            "path of the module or package folder"
        ) from None
    if not callable(getattr(mod, "all_specs", None)):
        raise ExtError(f"--kernels {module}: it has no all_specs() returning its KernelSpecs")
    specs = list(mod.all_specs())
    if not specs:
        raise ExtError(f"--kernels {module}: all_specs() returned no KernelSpec")
    if config:
        from build_tools.userconfig import load

        specs = load(config).apply(specs)  # ConfigError (a ValueError) names the file and key
    return [_op(module, spec) for spec in specs]


def _op(module: str, spec) -> Op:
    from tileaot._schema import OpSchema
    from tileaot._schema_op import unsupported

    where = f"--kernels {module}: op {spec.op!r}"
    schema = spec.extra.get("schema") if hasattr(spec, "extra") else None
    if not isinstance(schema, OpSchema):
        raise ExtError(f'{where} has no schema: give its KernelSpec extra={{"schema": SCHEMA}}')
    if schema.op != spec.op:
        raise ExtError(f"{where}: its schema is for {schema.op!r}")
    if not spec.op.isidentifier() or spec.op.startswith("_") or spec.op in _RESERVED:
        raise ExtError(f"{where}: the name must be a Python identifier, not private or reserved")
    why = unsupported(schema)
    if why:
        raise ExtError(f"{where}: {why}")
    return Op(schema, spec.doc)


def runtime_modules() -> list[str]:
    """RUNTIME_ROOTS and the tileaot modules they import (also inside functions), as files."""
    todo, seen = list(RUNTIME_ROOTS), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(ast.parse((PYTHON / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                todo += [node.module] if node.module else [a.name for a in node.names]
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names = [node.module] if isinstance(node, ast.ImportFrom) else node.names
                if any(str(getattr(n, "name", n)).partition(".")[0] == "tileaot" for n in names):
                    raise ExtError(f"tileaot/{name}.py imports tileaot by name: cannot be copied")
    return sorted(f"{n}.py" for n in seen)


def package_name(name: str | None, module: str) -> str:
    """`--name`, checked; by default the module's dotted name joined by ``_`` (``_ops`` added
    to a top-level module's name: the wheel must not shadow the kernels module itself)."""
    top = module.partition(".")[0]
    if name is None:
        name = module.replace(".", "_") + ("_ops" if module == top else "")
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise ExtError(f"--name {name!r}: a package name must be a Python identifier (my_ops)")
    if name in ("tileaot", top):
        whose = "tileaot's own package" if name == "tileaot" else "your kernels' package"
        raise ExtError(
            f"--name {name}: that is {whose} (the wheel would shadow it); choose another"
        )
    return name


def module_root(module: str) -> Path | None:
    """The folder the kernels module's top-level package is imported from (for the workers)."""
    top = importlib.import_module(module.partition(".")[0])
    file = getattr(top, "__file__", None)
    if file is None:
        return None
    file = Path(file).resolve()
    return file.parent.parent if file.name == "__init__.py" else file.parent


# ---- the staged project ---------------------------------------------------------------------


def stage(
    dest: Path, name: str, module: str, ops: list[Op], config: str | None, version: str
) -> Path:
    """Write build/ext/<name>/: pyproject.toml and the package folder. Returns the folder."""
    package = dest / name
    shutil.rmtree(package, ignore_errors=True)
    package.mkdir(parents=True)
    for file in (*runtime_modules(), "py.typed"):
        shutil.copy2(PYTHON / file, package / file)
    (package / "_ops.py").write_text(ops_source(name, module, ops))
    (package / "_ops.pyi").write_text(ops_stub(ops))
    (package / "__init__.py").write_text(init_source(name, module, ops))
    (dest / "pyproject.toml").write_text(pyproject(name, module, config, version))
    return dest


def _schema_call(schema) -> str:
    """``OpSchema(...)`` source that rebuilds `schema` in the wheel: its literal fields (text,
    dtypes, key, example, ...); every other field must be what they derive (tensors, scalars)."""
    args = {}
    for f in dataclasses.fields(schema):
        value = getattr(schema, f.name)
        text = repr(dict(value) if hasattr(value, "items") else value)
        try:
            ast.literal_eval(text)
        except (ValueError, SyntaxError):
            continue
        args[f.name] = text
    rebuilt = eval(f"OpSchema({', '.join(f'{k}={v}' for k, v in args.items())})", vars(_schema()))
    for f in dataclasses.fields(schema):
        if f.name not in args and getattr(rebuilt, f.name) != getattr(schema, f.name):
            raise ExtError(
                f"op {schema.op}: schema field {f.name} is not a literal and not derived from "
                "the others: the wheel rebuilds each schema from its literal fields"
            )
    return "OpSchema(" + ", ".join(f"{k}={v}" for k, v in args.items()) + ")"


def _schema():
    from tileaot import _schema

    return _schema


def ops_source(name: str, module: str, ops: list[Op]) -> str:
    lines = [
        f'"""The ops of {module}, from their schemas (generated by build_tools.extwheel)."""',
        "",
        "from ._schema import OpSchema",
        "from ._schema_op import schema_op",
        "",
    ]
    for op in ops:
        s = op.schema
        lines.append(f"{s.op.upper()} = {_schema_call(s)}")
        lines.append(f"{s.op} = schema_op({s.op.upper()}, {op.doc!r}, {name!r})")
    lines.append(f"OPS = ({''.join(op.schema.op + ', ' for op in ops)})")
    return "\n".join(lines) + "\n"


def ops_stub(ops: list[Op]) -> str:
    """_ops.pyi: the functions' signatures for type checkers (they are made at import)."""
    from tileaot._schema_op import header

    lines = ["# Generated by build_tools.extwheel: the signatures of _ops.py's functions.", ""]
    lines += ["import torch", "", "from ._schema import OpSchema", ""]
    for op in ops:
        stub = header(op.schema).replace("'", "")  # a stub's annotations need no quotes
        lines += [f"{op.schema.op.upper()}: OpSchema", f"def {stub}: ..."]
    return "\n".join(lines) + "\n"


def init_source(name: str, module: str, ops: list[Op]) -> str:
    names = [op.schema.op for op in ops]
    return f'''"""{name}: the TileLang kernels of {module}, compiled ahead of time by tileaot.

Ops: {", ".join(names)} (each one's docstring gives its contract). Calling them needs only the
NVIDIA driver. `register_torch_ops()` registers torch.ops.{name}.<op> and <op>_out; C++ callers
include <tileaot/ops.hpp> from {name}/include and link {name}/lib/lib{name}.so.
"""

from __future__ import annotations

from typing import Any

from ._ops import {", ".join(names)}

__all__ = [{", ".join(repr(n) for n in names)}, "register_torch_ops"]


def register_torch_ops() -> tuple[str, ...]:
    """Register torch.ops.{name}.<op> and <op>_out (imports torch); returns their names."""
    from . import _ops, _schema_torch

    return _schema_torch.register({name!r}, _ops.OPS)


def __getattr__(attr: str) -> Any:
    from . import _lib

    if attr in ("VariantMissError", "DriverError"):
        return getattr(_lib.native(), attr)  # ImportError, with what to do, if not built
    if attr == "__version__":
        return _lib.version()
    raise AttributeError(f"module {{__name__!r}} has no attribute {{attr!r}}")
'''


def pyproject(name: str, module: str, config: str | None, version: str) -> str:
    defines = {"TILEAOT_PACKAGE": name, "TILEAOT_SPECS": module}
    if config:
        defines["TILEAOT_CONFIG"] = str(Path(config).resolve())
    define_lines = "".join(f"{k} = {_toml(v)}\n" for k, v in defines.items())
    return f"""# Generated by python -m build_tools wheel --kernels {module}: do not edit.
[build-system]
requires = ["scikit-build-core>=0.10", "nanobind>=2.4"]
build-backend = "scikit_build_core.build"

[project]
name = {_toml(name)}
version = {_toml(version)}
description = "TileLang kernels of {module}, compiled ahead of time by tileaot"
requires-python = ">=3.10"
dependencies = []

[tool.scikit-build]
minimum-version = "0.10"
cmake.version = ">=3.24"
cmake.build-type = "Release"
cmake.source-dir = {_toml(str(ROOT))}
wheel.py-api = "cp312"
wheel.packages = [{_toml(name)}]
build-dir = "build/{{wheel_tag}}"

[tool.scikit-build.cmake.define]
{define_lines}"""


def _toml(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# ---- the command ----------------------------------------------------------------------------


def build(args, pip_args: list[str]) -> int:
    """Check everything, stage the project, run `pip wheel` on it; the exit status."""
    try:
        module, folder = resolve_module(args.kernels)
        paths = [str(ROOT), str(ROOT / "python"), *([str(folder)] if folder else [])]
        sys.path[:0] = paths  # this checkout's tileaot (its schema), then the kernels
        ops = load_ops(module, args.config)
        name = package_name(args.name, module)
        root = module_root(module)
        paths += [str(root)] if root and str(root) not in paths else []
        dest = stage(ROOT / "build" / "ext" / name, name, module, ops, args.config, args.version)
    except ValueError as e:  # ExtError, ConfigError: one line naming the option
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"tileaot wheel: {name} with {', '.join(o.schema.op for o in ops)} (from {module})")
    out = Path(args.out or ROOT / "dist" / name).resolve()
    cmd = [sys.executable, "-m", "pip", "wheel", str(dest), "--no-build-isolation", "--no-deps"]
    cmd += ["--no-index", "-w", str(out), *pip_args]
    env = dict(os.environ)
    # The tracing workers import the kernels module and, through it, tileaot's schema.
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=dest, env=env).returncode
