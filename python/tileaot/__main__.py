"""`python -m tileaot info`: version, archs, variants, and what this machine's GPU would run.

Never imports torch. Exits 0 on success (with or without a GPU), 1 if the native module is
missing or cannot be loaded.
"""

from __future__ import annotations

import argparse
import sys

from ._info import format_info, info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tileaot", description="Inspect this tileaot build."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    show = commands.add_parser("info", help="archs, ops, variants and the GPU's picks (default)")
    show.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    args = parser.parse_args(argv)
    try:
        text = format_info(info(getattr(args, "device", 0)))
    except ImportError as e:
        print(f"tileaot: {e}", file=sys.stderr)
        return 1
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
