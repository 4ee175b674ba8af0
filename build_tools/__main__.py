"""CLI: python -m build_tools {generate,compile,compile-all,list,config,wheel,sdist,audit-wheel,
                              merge,report,pack,archs,hip,watch,verify-lowering-classes}

generate needs tilelang + torch (CPU); compile needs only NVRTC (or nvcc) and the headers.
"""

from __future__ import annotations

import argparse
import os
import sys

from kernels_py.spec import DEFAULT_ARCHS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m build_tools")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="trace the matrix into a gen folder")
    gen.add_argument("--out", required=True, help="gen folder (e.g. build/gen)")
    gen.add_argument("--archs", default=",".join(DEFAULT_ARCHS), help="e.g. 90a,80 or sm_90a")
    gen.add_argument("--ops", default="*", help="globs over variant names, e.g. 'rms_norm*'")
    gen.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    gen.add_argument("--specs", default="kernels_py", help="module whose all_specs() to build")
    gen.add_argument("--config", help="bring-your-shapes TOML (see build_tools/userconfig.py)")
    gen.add_argument(
        "--ptx",
        default=os.environ.get("TILEAOT_PTX_ARCHS", "auto"),
        help="archs whose traced sources are also embedded as PTX: auto (80 when sm_80 is "
        "built: the forward path), off, or a list such as 70,75,80 (the PTX test mode)",
    )
    gen.add_argument("--shard", help="INDEX/COUNT: trace only this slice (then `merge`)")
    lst = sub.add_parser("list", help="print the variants a config selects (no tracing)")
    lst.add_argument("--archs", default=",".join(DEFAULT_ARCHS))
    lst.add_argument("--ops", default="*")
    lst.add_argument("--config", help="bring-your-shapes TOML (see build_tools/userconfig.py)")
    sub.add_parser("compile", help="compile one device source to a cubin", add_help=False)
    sub.add_parser("compile-all", help="compile every cubin of a gen folder", add_help=False)
    for name, (_, text) in _MODULE_COMMANDS.items():
        sub.add_parser(name, help=text, add_help=False)
    return parser


# Commands that own their argument parsing: name -> (module with main(argv), help).
_MODULE_COMMANDS = {
    "config": ("build_tools.userconfig", "check a bring-your-shapes TOML, list its variants"),
    "wheel": ("build_tools.userwheel", "build a wheel (optionally from a TOML) offline"),
    "sdist": ("build_tools.sdist", "source distribution with generated sources (no tilelang)"),
    "audit-wheel": ("build_tools.wheel_audit", "check a wheel bundles/needs no CUDA library"),
    "merge": ("build_tools.merge", "merge the gen folders of `generate --shard i/n` into one"),
    "report": ("build_tools.report", "write GEN/report.{md,json}; check the size budget"),
    "pack": ("build_tools.blob", "pack a cubin into the (zlib-compressed) blob libtileaot embeds"),
    "archs": ("build_tools.archs", "canonical form of an arch list (90, 9.0, H100 -> 90a)"),
    "hip": ("build_tools.hip", "HIP sources + manifest for gfx90a/gfx942 (docs/HIP.md)"),
    "watch": ("build_tools.watch", "print a build's progress while pip hides it (build_wheel.sh)"),
    "verify-lowering-classes": (
        "build_tools.verify_lowering",
        "trace each arch of every lowering class apart; fail where a class's traces differ",
    ),
}


def _apply_config_option(args) -> None:
    """--config FILE: checked now (before any tracing); its archs replace --archs, and the
    matrix reads the file through $TILEAOT_CONFIG (also in `generate`'s worker processes)."""
    if not getattr(args, "config", None):
        return
    import importlib

    from build_tools.userconfig import ENV_VAR, load

    config = load(args.config)
    config.apply(importlib.import_module(getattr(args, "specs", "kernels_py")).all_specs())
    if config.archs:
        args.archs = ",".join(config.archs)
    os.environ[ENV_VAR] = os.path.abspath(args.config)


def _list(args) -> int:
    from build_tools.lowering import ENV_VAR, sharing_enabled, trace_count
    from build_tools.matrix import enumerate_variants, parse_archs, parse_ops
    from build_tools.userconfig import from_env
    from kernels_py import all_specs

    archs, ops = parse_archs(args.archs), parse_ops(args.ops)
    points = enumerate_variants(all_specs(), archs, ops, from_env())
    for p in points:
        print(f"{p.name:40s} key={p.key_string:12s} archs={','.join(p.archs)}")
    rows, traces = trace_count(points, share=False), trace_count(points, sharing_enabled())
    print(
        f"# {len(points)} variants, {rows} (variant, arch) rows, {traces} traces "
        f"(lowering classes; {ENV_VAR}=1 traces every row)",
        file=sys.stderr,
    )
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("compile", "compile-all"):
        from build_tools import compile as compile_mod

        return compile_mod.main(argv)
    if argv and argv[0] in _MODULE_COMMANDS:
        import importlib

        return importlib.import_module(_MODULE_COMMANDS[argv[0]][0]).main(argv[1:])
    if argv and argv[0] == "_worker":  # internal: one worker process of build_tools.work_queue
        from build_tools.work_queue import worker_main

        return worker_main(argv[1])
    args = _parser().parse_args(argv)
    try:
        _apply_config_option(args)
        from build_tools.matrix import parse_archs

        args.archs = ",".join(parse_archs(args.archs, "--archs"))
        if args.command == "generate" and args.ptx != "auto":
            from build_tools.archs import parse_ptx_archs

            parse_ptx_archs(args.ptx, "--ptx")
    except ValueError as e:  # userconfig.ConfigError: names the file, key and allowed values
        print(f"error: {e}", file=sys.stderr)
        return 2
    from build_tools.matrix import parse_archs

    try:  # before anything is traced: a mistake is one line naming the option
        parse_archs(args.archs)
    except ValueError as e:
        print(f"error: --archs {args.archs!r}: {e}", file=sys.stderr)
        return 2
    if args.command == "list":
        return _list(args)
    os.environ.setdefault("TILELANG_CACHE_DIR", os.path.join(os.path.abspath(args.out), ".tlcache"))
    from build_tools.generate import main as generate_main

    return generate_main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
