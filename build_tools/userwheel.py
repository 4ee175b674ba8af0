"""`python -m build_tools wheel --config my_model.toml`: your own wheel, offline, one command.
(`--kernels MODULE`: a wheel of kernels kept outside this repository, build_tools/extwheel.py.)

Checks the config first (errors name the key and the allowed values), then runs
`pip wheel --no-build-isolation --no-index` on this checkout with -DTILEAOT_CONFIG=<file>:
CMake reads the file's archs and ops, and `generate` enumerates only its variants. Needs the
build dependencies installed once (`pip install -r requirements-build.txt`), nothing from
the network afterwards. Each config gets its own build folder, so switching between configs
and the default build does not regenerate everything.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m build_tools wheel",
        description="Build a tileaot wheel offline; extra arguments go to `pip wheel`.",
    )
    parser.add_argument("--config", help="bring-your-shapes TOML (examples/shapes/*.toml)")
    parser.add_argument("-o", "--out", help="wheel folder (default dist/ or dist/<config>/)")
    parser.add_argument(
        "--kernels",
        help="your own kernels: a module (name or path) with all_specs(), each KernelSpec with "
        'extra={"schema": SCHEMA}; builds package --name instead of tileaot (build_tools/'
        "extwheel.py, examples/external_kernels)",
    )
    parser.add_argument("--name", help="with --kernels: the package (default: the module's name)")
    parser.add_argument("--version", default="0.1.0", help="with --kernels: the wheel's version")
    args, pip_args = parser.parse_known_args(argv)
    if args.kernels:
        from build_tools.extwheel import build

        return build(args, pip_args)
    if args.name:
        print("error: --name names the package of --kernels; give --kernels too", file=sys.stderr)
        return 2
    cmd = pip_command(args.config, args.out, pip_args)
    if cmd is None:
        return 2
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT).returncode


def pip_command(config: str | None, out: str | None, extra: list[str]) -> list[str] | None:
    """The `pip wheel` command line, or None (after printing why) if the config is unusable."""
    cmd = [sys.executable, "-m", "pip", "wheel", str(ROOT)]
    cmd += ["--no-build-isolation", "--no-deps", "--no-index"]
    build_dir = "build/{wheel_tag}"
    if config:
        from build_tools.userconfig import ConfigError, load
        from kernels_py import all_specs

        path = Path(config).resolve()
        try:
            specs = load(path).apply(all_specs())
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return None
        print(f"tileaot wheel: {path.name} selects {len(specs)} ops", flush=True)
        cmd.append(f"-Ccmake.define.TILEAOT_CONFIG={path}")
        build_dir = f"build/config-{path.stem}/{{wheel_tag}}"
        out = out or str(ROOT / "dist" / path.stem)
    cmd += [f"-Cbuild-dir={build_dir}", "-w", out or str(ROOT / "dist"), *extra]
    return cmd
