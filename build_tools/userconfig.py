"""Bring your shapes: a TOML file choosing the ops, dtypes, specialised sizes and archs to build.

    [build]
    archs = ["90a"]                    # optional: replaces TILEAOT_ARCHS / --archs
    ops = ["rms_norm", "topk_gate"]    # optional: default = the [ops.<name>] tables below

    [ops.rms_norm]
    dtype = ["bf16"]                   # any key field of the op: the values to build
    specs = [{N = 2048}, {N = 128}]    # specialised sizes; the generic variant is always built

An op named in [build] ops without a table gets all its keys and its own specialisations.
A key field left out keeps all its values; `specs` left out keeps the op's own sizes and
`specs = []` builds the generic variant only.

Validation is strict, because a typo would otherwise build a wheel without the fast path the
user asked for: every error names the file, the key and the allowed values. The config is
applied to the KernelSpecs (`UserConfig.apply`) before the matrix is enumerated, so the
variant names, registry and manifest need no notion of it. Reading it needs no tilelang.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kernels_py.spec import BUILDABLE_ARCHS, KernelSpec, short

ENV_VAR = "TILEAOT_CONFIG"  # set by CMake (-DTILEAOT_CONFIG=FILE) for `build_tools generate`
TOP_KEYS = ("build", "ops")
BUILD_KEYS = ("archs", "ops")


class ConfigError(ValueError):
    """A build config that cannot be used; the message says which key and what is allowed."""


@dataclass(frozen=True)
class OpChoice:
    """What one [ops.<name>] table asks for (checked against the op by `UserConfig.apply`)."""

    fields: Mapping[str, tuple[str, ...]]  # key field -> values to build ("bf16", "g128")
    specs: tuple[Mapping[str, int], ...] | None  # None: the op's own specialisations


@dataclass(frozen=True)
class UserConfig:
    source: str  # the file, for error messages
    archs: tuple[str, ...] | None  # canonical ('sm_90a', ...); None: not set by the file
    ops: Mapping[str, OpChoice]  # in file order

    def apply(self, specs: Iterable[KernelSpec]) -> list[KernelSpec]:
        """The selected ops only, each with its keys and specialisations narrowed as asked."""
        by_op = {s.op: s for s in specs}
        unknown = [op for op in self.ops if op not in by_op]
        if unknown:
            self._fail(
                f"unknown op {unknown[0]!r}{_maybe(unknown[0], by_op)}; ops: {', '.join(by_op)}"
            )
        return [self._narrow(s, self.ops[s.op]) for s in by_op.values() if s.op in self.ops]

    def _narrow(self, spec: KernelSpec, choice: OpChoice) -> KernelSpec:
        keys = _matching_keys(spec, choice.fields, lambda msg: self._fail(f"[ops.{spec.op}] {msg}"))
        sizes = spec.specs
        if choice.specs is not None:
            sizes = ({}, *_checked_specs(spec, choice.specs, self._fail))
            for s in sizes[1:]:
                for key in keys:
                    if not any(spec.supports(a, key, s) for a in BUILDABLE_ARCHS):
                        continue  # never built (per_token_cast_fp8's token mode: generic only)
                    # The spec's own rule first (KernelSpec.spec_error), then the factory's
                    # limits as tileaot/_buildable.py states them.
                    why = spec.spec_error(key, s) or buildable_why_not(
                        spec.op, spec.key_string(key), s
                    )
                    if why:
                        self._fail(
                            f"[ops.{spec.op}] specs: {_inline(s)} cannot be built for "
                            f"{spec.key_string(key)}: {why}; remove it (the generic variant "
                            "serves these sizes)"
                        )
        return dataclasses.replace(spec, keys=keys, specs=sizes)

    def _fail(self, message: str):
        raise ConfigError(f"{self.source}: {message}")


def _matching_keys(spec: KernelSpec, fields, fail) -> tuple[Mapping[str, str], ...]:
    """The op's keys whose every asked field has one of the asked values (short or long names)."""
    allowed = {f: list(dict.fromkeys(short(k[f]) for k in spec.keys)) for f in spec.keys[0]}
    for field, values in fields.items():
        if field not in allowed:
            names = ", ".join((*allowed, "specs"))
            fail(f"unknown key {field!r}{_maybe(field, allowed)}; allowed: {names}")
        for value in values:
            if short(value) not in allowed[field]:
                fail(
                    f"{field} = {value!r} is not built for {spec.op}; allowed: "
                    f"{', '.join(allowed[field])}"
                )
    wanted = {f: {short(v) for v in vs} for f, vs in fields.items()}
    keys = tuple(k for k in spec.keys if all(short(k[f]) in vs for f, vs in wanted.items()))
    if not keys:
        have = "; ".join(spec.key_string(k) for k in spec.keys)
        fail(f"no key of {spec.op} combines these values; its keys are: {have}")
    return keys


def _checked_specs(spec: KernelSpec, asked, fail) -> list[dict[str, int]]:
    """Each asked specialisation must fix the same sizes as one of the op's own (rms_norm: N;
    gemm: N and K): the kernel factory only knows how to specialise those."""
    shapes = sorted({tuple(sorted(s)) for s in spec.specs if s})
    if not shapes and any(asked):
        fail(
            f"[ops.{spec.op}] specs: {spec.op} has no specialised sizes (generic only); "
            "remove `specs`"
        )
    out: list[dict[str, int]] = []
    for s in asked:
        if not s:
            continue  # {} is the generic variant, built anyway
        if tuple(sorted(s)) not in shapes:
            want = " or ".join("{" + ", ".join(f"{a} = ..." for a in sh) + "}" for sh in shapes)
            fail(f"[ops.{spec.op}] specs: {_inline(s)} does not fit {spec.op}; give {want}")
        if dict(s) not in out:
            out.append(dict(s))
    return out


def buildable_why_not(op: str, key: str, spec: Mapping[str, int]) -> str | None:
    """The kernel's own limits on a specialisation (python/tileaot/_buildable.py, shared with
    `python -m tileaot check`), checked before anything is traced: None if it builds."""
    return _buildable().why_not(op, key, spec)


def _buildable():
    """python/tileaot/_buildable.py of this checkout, by path: an installed tileaot may be older."""
    import importlib.util
    import sys

    name = "_tileaot_buildable"
    module = sys.modules.get(name)
    if module is None:
        path = Path(__file__).resolve().parents[1] / "python" / "tileaot" / "_buildable.py"
        loader_spec = importlib.util.spec_from_file_location(name, path)
        assert loader_spec is not None and loader_spec.loader is not None
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        loader_spec.loader.exec_module(module)
    return module


def _maybe(name: str, choices: Iterable[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _inline(table: Mapping[str, int]) -> str:
    """{'N': 5} as the user wrote it in TOML: {N = 5}."""
    return "{" + ", ".join(f"{k} = {v}" for k, v in table.items()) + "}"


# ---- reading the file -----------------------------------------------------------------------


def load(path: str | os.PathLike) -> UserConfig:
    """Parse and type-check a config file (checks against the ops happen in `apply`)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read build config {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file; give a TOML build config") from None
    return parse(text, str(path))


def parse(text: str, source: str = "<config>") -> UserConfig:
    def fail(message: str):
        raise ConfigError(f"{source}: {message}")

    data = _toml_loads(text, fail)
    _only(data, TOP_KEYS, "top level", fail)
    build = _table(data.get("build", {}), "[build]", fail)
    _only(build, BUILD_KEYS, "[build]", fail)
    tables = _table(data.get("ops", {}), "[ops]", fail)
    archs = None
    if "archs" in build:
        from build_tools.matrix import parse_archs

        try:
            archs = parse_archs(_strings(build["archs"], "[build] archs", fail), "[build] archs")
        except ValueError as e:  # names the item, "[build] archs" and the accepted forms
            fail(str(e))
    names = _strings(build["ops"], "[build] ops", fail) if "ops" in build else list(tables)
    if not names:
        fail("selects no ops: add `[build] ops = [...]` or an `[ops.<name>]` table")
    stray = [op for op in tables if op not in names]
    if stray:
        fail(f"[ops.{stray[0]}] is configured but {stray[0]!r} is not in [build] ops")
    ops = {op: _op_choice(op, tables.get(op, {}), fail) for op in dict.fromkeys(names)}
    return UserConfig(source, archs, ops)


def _op_choice(op: str, table, fail) -> OpChoice:
    table = _table(table, f"[ops.{op}]", fail)
    fields = {
        k: tuple(_strings(v, f"[ops.{op}] {k}", fail)) for k, v in table.items() if k != "specs"
    }
    empty = [k for k, v in fields.items() if not v]
    if empty:
        fail(f"[ops.{op}] {empty[0]} is empty: list the values to build, or leave the key out")
    specs = None
    if "specs" in table:
        raw = table["specs"]
        if not isinstance(raw, list) or not all(isinstance(s, dict) for s in raw):
            fail(f"[ops.{op}] specs must be a list of tables, e.g. specs = [{{N = 4096}}]")
        for s in raw:
            bad = [
                k for k, v in s.items() if isinstance(v, bool) or not isinstance(v, int) or v <= 0
            ]
            if bad:
                fail(f"[ops.{op}] specs: {bad[0]} = {s[bad[0]]!r} must be a positive integer")
        specs = tuple(raw)
    return OpChoice(fields, specs)


def _toml_loads(text: str, fail) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            fail("reading a TOML build config needs Python >= 3.11 or `pip install tomli`")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        hint = ""
        if text.lstrip().startswith("{"):  # a model's config.json given as a build config
            hint = (
                " (a model's config.json? `python -m tileaot check FILE --save-config my.toml` "
                "writes the build config for it)"
            )
        fail(f"not valid TOML: {e}{hint}")


def _only(table: Mapping, allowed: tuple[str, ...], where: str, fail) -> None:
    for key in table:
        if key not in allowed:
            fail(f"unknown key {key!r} at {where}; allowed: {', '.join(allowed)}")


def _table(value, where: str, fail) -> dict:
    if not isinstance(value, dict):
        fail(f"{where} must be a table")
    return value


def _strings(value, where: str, fail) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        fail(f'{where} must be a list of strings, e.g. ["bf16"]')
    return value


def from_env() -> UserConfig | None:
    """The config named by $TILEAOT_CONFIG (how CMake hands it to `generate`), if any."""
    path = os.environ.get(ENV_VAR, "")
    return load(path) if path else None


# ---- `python -m build_tools config FILE [--cmake]` --------------------------------------------


def main(argv: list[str]) -> int:
    import argparse
    import functools
    import sys

    from build_tools.matrix import enumerate_variants
    from build_tools.specs import load_specs
    from kernels_py.spec import DEFAULT_ARCHS

    parser = argparse.ArgumentParser(
        prog="python -m build_tools config", description="Check a build config, list its variants."
    )
    parser.add_argument("file", help="the TOML file")
    parser.add_argument(
        "--cmake", action="store_true", help="print archs=/ops= lines for CMakeLists.txt"
    )
    parser.add_argument("--specs", default="kernels_py", help="module whose all_specs() to build")
    args = parser.parse_args(argv)
    all_specs = functools.partial(load_specs, args.specs)
    try:
        config = load(args.file)
        specs = config.apply(all_specs())
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.cmake:  # archs empty: the file leaves them to TILEAOT_ARCHS
        print(f"archs={','.join(a[3:] for a in config.archs or ())}")
        print(f"ops={','.join(config.ops)}")
        return 0
    points = enumerate_variants(all_specs(), config.archs or DEFAULT_ARCHS, config=config)
    for p in points:
        print(f"{p.name:40s} key={p.key_string:12s} archs={','.join(p.archs)}")
    print(f"{args.file}: {len(points)} variants of {len(specs)} ops", file=sys.stderr)
    return 0
