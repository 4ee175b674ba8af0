"""CLI: python -m build_tools {generate,compile,compile-all,list} ...

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
    lst = sub.add_parser("list", help="print the variants a config selects (no tracing)")
    lst.add_argument("--archs", default=",".join(DEFAULT_ARCHS))
    lst.add_argument("--ops", default="*")
    sub.add_parser("compile", help="compile one device source to a cubin", add_help=False)
    sub.add_parser("compile-all", help="compile every cubin of a gen folder", add_help=False)
    return parser


def _list(args) -> int:
    from build_tools.matrix import enumerate_variants, parse_archs, parse_ops
    from kernels_py import all_specs

    for p in enumerate_variants(all_specs(), parse_archs(args.archs), parse_ops(args.ops)):
        print(f"{p.name:40s} key={p.key_string:12s} archs={','.join(p.archs)}")
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("compile", "compile-all"):
        from build_tools import compile as compile_mod

        return compile_mod.main(argv)
    if argv and argv[0] == "_trace":  # internal: one tracing worker of `generate --jobs N`
        from build_tools.generate import trace_worker

        return trace_worker(argv[1])
    args = _parser().parse_args(argv)
    if args.command == "list":
        return _list(args)
    os.environ.setdefault("TILELANG_CACHE_DIR", os.path.join(os.path.abspath(args.out), ".tlcache"))
    from build_tools.generate import main as generate_main

    return generate_main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
