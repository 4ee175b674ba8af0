"""The build cache: traced variants and compiled cubins, stored by content hash.

Location: $TILEAOT_CACHE_DIR, else $XDG_CACHE_HOME/tileaot, else ~/.cache/tileaot.
Layout: <cache>/trace/<key[:2]>/<key>.json, <cache>/cubin/<key[:2]>/<key>.cubin and
<cache>/timings.json (seconds per "variant@arch", to start the slowest traces first).

A key hashes everything its entry depends on, so entries are never invalidated, only missed:
deleting the folder (or any part of it) is always safe. Writes are atomic (temp file +
rename), so parallel builds may share one cache.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the source tree holding build_tools/


def cache_dir() -> Path:
    if os.environ.get("TILEAOT_CACHE_DIR"):
        return Path(os.environ["TILEAOT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tileaot"


def digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))  # length-prefixed: no ambiguous joins
        h.update(data)
    return h.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; cache entries may be shared
    os.replace(tmp, path)


class Cache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_dir()

    def _path(self, kind: str, key: str, suffix: str) -> Path:
        return self.root / kind / key[:2] / f"{key}{suffix}"

    def get_json(self, kind: str, key: str):
        path = self._path(kind, key, ".json")
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):  # missing, or torn by a crash: a miss either way
            return None

    def put_json(self, kind: str, key: str, value) -> None:
        write_atomic(self._path(kind, key, ".json"), json.dumps(value).encode())

    def get_bytes(self, kind: str, key: str, suffix: str) -> bytes | None:
        try:
            return self._path(kind, key, suffix).read_bytes()
        except OSError:
            return None

    def put_bytes(self, kind: str, key: str, suffix: str, data: bytes) -> None:
        write_atomic(self._path(kind, key, suffix), data)

    def timings(self) -> dict[str, float]:
        try:
            data = json.loads((self.root / "timings.json").read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def add_timings(self, new: dict[str, float]) -> None:
        """Merge `new` into timings.json (last writer wins on a race: timings are hints)."""
        if new:
            merged = self.timings() | new
            write_atomic(self.root / "timings.json", json.dumps(merged, sort_keys=True).encode())


# ---------------------------------------------------------------------------------------------
# What a kernel module depends on: its own source and every project module it imports
# ---------------------------------------------------------------------------------------------


def _imported_names(tree: ast.AST, package: str) -> set[str]:
    """Absolute names of the modules a module's code imports (anywhere, lazy imports too)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)  # submodules
    return names


def _under(path: str | None, roots: tuple[Path, ...]) -> bool:
    if not path or "site-packages" in path:
        return False
    parents = Path(path).resolve().parents
    return any(root in parents for root in roots)


def _source_file(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin).resolve()


def _project_origin(name: str, roots: tuple[Path, ...]) -> Path | None:
    """The source file of module `name` if it lies under one of `roots` (not site-packages)."""
    try:
        # The top-level lookup imports nothing; a dotted one imports its parent packages,
        # so look there only for packages of our own (not tilelang, torch, ...).
        top = importlib.util.find_spec(name.partition(".")[0])
        places = [top.origin, *(top.submodule_search_locations or [])] if top else []
        if not any(_under(str(p), roots) for p in places if p):
            return None
        origin = _source_file(name)
    except (ImportError, ValueError):
        return None
    return origin if origin and _under(str(origin), roots) else None


def _tree_of(module: str, origin: Path) -> tuple[Path, ...]:
    """The folder holding `module`'s top-level package: a spec module outside this source
    tree (python -m build_tools generate --specs my_kernels) is tracked with its helpers."""
    if "site-packages" in str(origin):
        return ()
    return (origin.parents[module.count(".") + (origin.name == "__init__.py")],)


@functools.cache
def module_digest(module: str, root: Path = ROOT) -> str:
    """Hash of `module`'s code and of every module of its source tree (or `root`) that it
    imports, transitively: editing a kernel (or a helper it imports) changes exactly its ops'
    keys. Code is hashed as its syntax tree: comments and formatting do not count."""
    start = _source_file(module)
    if start is None:
        raise ValueError(f"cannot hash the code of {module!r}: no Python source found for it")
    roots = (root, *_tree_of(module, start))
    trees: dict[str, ast.Module] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in trees:
            continue
        origin = start if name == module else _project_origin(name, roots)
        if origin is None:
            continue
        trees[name] = ast.parse(origin.read_bytes())
        package = name if origin.name == "__init__.py" else name.rpartition(".")[0]
        todo += sorted(_imported_names(trees[name], package))
    parts = []
    for name in sorted(trees):
        parts += [name, ast.dump(trees[name])]  # no line numbers: include_attributes=False
    return digest(*parts)
