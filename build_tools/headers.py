"""The headers that generated device sources include, so a source distribution can ship them.

Device sources include tilelang's `tl_templates/` and the CUTLASS/cute headers vendored in
tilelang. An sdist must compile without tilelang installed, so it carries the headers the
sources reach: a few dozen files (~5 MB for the whole default matrix) instead of tilelang's
35 MB of headers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)


def include_closure(texts: Iterable[str], roots: Sequence[str | Path]) -> dict[str, Path]:
    """Every header reachable through `#include` from `texts` that lives under one of `roots`,
    as {path relative to its root: file}, roots searched in order (as the compiler's -I).

    Preprocessor conditionals are not evaluated, so this is a superset of what any compiler
    or arch pulls in. Headers found in no root (CUDA's, the C++ library's) belong to the
    toolchain and are left out; so are macro includes (`#include CUDA_STD_HEADER(x)`), which
    in CUTLASS name CUDA headers.
    """
    roots = [Path(r).resolve() for r in roots]
    found: dict[str, Path] = {}
    todo = [(text, None) for text in texts]
    while todo:
        text, here = todo.pop()
        for quote, name in INCLUDE.findall(text):
            hit = _resolve(name, here if quote == '"' else None, roots)
            if hit is None or hit[0] in found:
                continue
            found[hit[0]] = hit[1]
            todo.append((hit[1].read_text(errors="replace"), hit[1].parent))
    return dict(sorted(found.items()))


def _resolve(name: str, here: Path | None, roots: list[Path]) -> tuple[str, Path] | None:
    """(path relative to its root, file) of an include, or None when no root holds it."""
    for base in ([here] if here else []) + roots:
        path = (base / name).resolve()
        if not path.is_file():
            continue
        for root in roots:
            if path.is_relative_to(root):
                return path.relative_to(root).as_posix(), path
    return None


def copy_headers(headers: dict[str, Path], dest: Path) -> int:
    """Copy {relative path: file} under `dest`; returns the bytes copied."""
    total = 0
    for rel, src in headers.items():
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        data = src.read_bytes()
        out.write_bytes(data)
        total += len(data)
    return total
