"""`python -m tileaot`: inspect this build, check a model against it, find the C++ package.

    python -m tileaot info [--json]           archs, variants, and what this GPU would run
    python -m tileaot check MODEL [--arch A]  which calls of a model are prebuilt for a GPU
    python -m tileaot --cmake-prefix-path     for CMAKE_PREFIX_PATH: find_package(tileaot)

Never imports torch. Exit status: 0 on success (`check`: every call covered), 1 when `check`
finds a miss or the native module is missing, 2 for bad arguments or files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ._info import format_info, info


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmake_prefix_path:
        return _cmake_prefix_path()
    if args.command == "check":
        return _check(args)
    return _info(getattr(args, "device", 0), getattr(args, "json", False))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tileaot", description="Inspect this tileaot build."
    )
    parser.add_argument(
        "--cmake-prefix-path",
        action="store_true",
        help="print the folder to add to CMAKE_PREFIX_PATH for find_package(tileaot CONFIG)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    show = commands.add_parser("info", help="archs, ops, variants and the GPU's picks (default)")
    show.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    show.add_argument("--json", action="store_true", help="print the inventory as JSON")
    check = commands.add_parser(
        "check", help="which calls of a model (config.json or .toml) are prebuilt for a GPU"
    )
    check.add_argument("config", help="model config: a Hugging Face config.json, or TOML")
    check.add_argument(
        "--arch",
        help="the GPU: a target (sm_90a, 100f), a compute capability (9.0, 90) or a name as "
        'NVIDIA or nvidia-smi writes it (H200, "NVIDIA H800", B300, "RTX PRO 6000")',
    )
    check.add_argument("--tokens", type=int, help="rows per call (default: config or 4096)")
    check.add_argument("--manifest", help="manifest.json of a build (default: this wheel's)")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument(
        "--save-config", metavar="FILE", help="write the suggested bring-your-shapes TOML here"
    )
    return parser


def _info(device: int, as_json: bool) -> int:
    try:
        data = info(device)
    except ImportError as e:
        print(f"tileaot: {e}", file=sys.stderr)
        return 1
    print(json.dumps(data, indent=1) if as_json else format_info(data))
    return 0


def _check(args: argparse.Namespace) -> int:
    import dataclasses

    from . import _check, _manifest, _model_calls

    try:
        _check_paths(args)
        cfg = _model_calls.load_config(args.config)
        if args.tokens is not None:
            cfg = dataclasses.replace(cfg, tokens=args.tokens)
        device = args.arch or cfg.arch or _this_gpu()
        report = _check.check(cfg, _manifest.load(args.manifest), device)
    except (OSError, ValueError) as e:  # unreadable files, bad configs, unknown archs
        print(f"tileaot check: {e}", file=sys.stderr)
        return 2
    text = json.dumps(_check.to_json(report), indent=1) if args.json else None
    print(text or _check.format_report(report))
    if args.save_config:
        try:
            Path(args.save_config).write_text(_check.user_config(report))
        except OSError as e:  # checked above; a write can still fail (disk full, permissions)
            print(f"tileaot check: --save-config {args.save_config}: {e.strerror}", file=sys.stderr)
            return 2
    return 0 if report.covered else 1


def _check_paths(args: argparse.Namespace) -> None:
    """The mistakes that would otherwise surface after the report: one line, before any work."""
    config = Path(args.config)
    if config.is_dir():
        hint = " (give its config.json)" if (config / "config.json").is_file() else ""
        raise ValueError(f"{config} is a folder, not a model config{hint}")
    if not config.is_file():
        raise ValueError(
            f"no model config at {config}: give a Hugging Face config.json or a TOML file "
            "(examples/models/ has some)"
        )
    if args.tokens is not None and args.tokens < 1:
        raise ValueError(f"--tokens {args.tokens}: give the rows per call, a positive integer")
    if args.save_config:
        out = Path(args.save_config)
        if out.is_dir():
            raise ValueError(
                f"--save-config {out} is a folder: give a file name, e.g. {out}/model.toml"
            )
        if not out.parent.is_dir():
            raise ValueError(
                f"--save-config {out}: folder {out.parent} does not exist (create it first, "
                "or save elsewhere)"
            )


def _this_gpu() -> str:
    """The arch of CUDA device 0, when neither --arch nor the config names one."""
    from . import _lib

    try:
        arch = _lib.native().device_arch(0)
    except (ImportError, RuntimeError, OSError):
        arch = None
    if arch is None:
        raise ValueError("no GPU here to check against: pass --arch (e.g. --arch sm_90a or H200)")
    return str(arch)


def _cmake_prefix_path() -> int:
    """The installed package folder: CMake finds share/cmake/tileaot/tileaotConfig.cmake there."""
    prefix = Path(__file__).resolve().parent
    config = prefix / "share" / "cmake" / "tileaot" / "tileaotConfig.cmake"
    if not config.is_file():
        print(
            f"tileaot: no CMake package at {config.parent}: this is not an installed wheel (a "
            "source checkout?). Build and install the wheel (bash scripts/build_wheel.sh) and run "
            "this again.",
            file=sys.stderr,
        )
        return 1
    print(prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
