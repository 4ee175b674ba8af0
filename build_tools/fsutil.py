"""File helpers every build stage uses (a leaf module: it imports nothing of build_tools)."""

from __future__ import annotations

import os
from pathlib import Path


def write_if_different(path: Path, data: str | bytes) -> bool:
    """Write `data` (text is UTF-8 encoded) only when the content changes, atomically, so the
    build's timestamps stay meaningful; True if it wrote."""
    if isinstance(data, str):
        data = data.encode()
    if path.exists() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True
