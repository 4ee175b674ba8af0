"""The arch spellings of python/tileaot/_arch.py, for the build (--archs, TILEAOT_ARCHS, TOML).

Loaded by path, not imported as `tileaot._arch`: the build runs from a checkout where `tileaot`
may be an installed wheel of another version (or absent). `python -m build_tools archs LIST`
prints the canonical list (70,80,90a,100f) or one line naming the bad item (CMake calls it).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parent.parent / "python" / "tileaot" / "_arch.py"
_spec = importlib.util.spec_from_file_location("_tileaot_build_arch", _PATH)
assert _spec is not None and _spec.loader is not None
arch = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = arch  # dataclasses look their module up by name
_spec.loader.exec_module(arch)


def parse_ptx_archs(text: str, where: str = "TILEAOT_PTX_ARCHS") -> list[str]:
    """'80' / '70;75;80' / 'off' → ['sm_80'] ...: the traced sources whose PTX a build embeds."""
    if text.strip().lower() in ("", "off", "none", "0"):
        return []
    return arch.parse_build_archs(text, where)


def main(argv: list[str]) -> int:
    """`python -m build_tools archs [--ptx] LIST`: the canonical list, or a one-line error."""
    ptx = bool(argv) and argv[0] == "--ptx"
    rest = argv[1:] if ptx else argv
    if len(rest) != 1:
        print("usage: python -m build_tools archs [--ptx] LIST", file=sys.stderr)
        return 2
    try:
        if ptx:
            targets = parse_ptx_archs(rest[0])
        else:
            targets = arch.parse_build_archs(rest[0], "TILEAOT_ARCHS")
    except ValueError as e:
        print(f"tileaot: {e}", file=sys.stderr)
        return 1
    print(",".join(t.removeprefix("sm_") for t in targets) or "off")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
