"""Where an NVRTC compile's CPU time goes: one source per program vs several in one program.

    python bench/compile_cost.py GEN --arch sm_90a --arch sm_80 [--batch 4] [--limit 8]

GEN is a gen folder of single sources (`TILEAOT_BATCH_MAX=1 python -m build_tools generate
--out GEN --ops ...`). For each arch it takes the first `--limit` sources GEN compiles for that
arch (GEN/cubins.cmake) and compiles, with the build's own NVRTC options (build_tools.compile):
(1) the first source's includes with an empty kernel (what parsing the headers costs), (2) each
source alone, (3) the sources `--batch` at a time, joined into one program as the build joins
them (build_tools.generate.batch_text). Figures are CPU seconds of this process
(resource.getrusage: NVRTC runs in-process), not wall time: the machine may be shared. A
warm-up compile goes first (NVRTC's set-up is not counted).
"""

from __future__ import annotations

import argparse
import re
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from build_tools import compile as C  # noqa: E402
from build_tools.generate import batch_text  # noqa: E402


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(tc, code: str, name: str, flags: list[str]) -> tuple[float, int]:
    t = cpu()
    out = C._nvrtc_compile(tc, code, name, flags)
    return cpu() - t, len(out)


def headers_only(codes: list[str]) -> str:
    """The first source's preamble (its includes, before its first kernel) + an empty kernel."""
    head = codes[0][: codes[0].index('extern "C"')]
    return head + 'extern "C" __global__ void tileaot_empty() {}\n'


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("gen", type=Path)
    p.add_argument("--arch", action="append", required=True)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--limit", type=int, default=8)
    p.add_argument("--match", default="", help="regex over source names")
    args = p.parse_args()
    tc = C.find_nvrtc()
    dirs = C.kernel_include_dirs()
    entries = C.read_cubins_cmake(args.gen)
    for arch in map(C.normalize_arch, args.arch):
        # the sources GEN compiles for this arch (one per variant: a batch's real members)
        srcs = [
            args.gen / e.src for e in entries if e.arch == arch and re.search(args.match, e.src)
        ]
        srcs = srcs[: args.limit]
        raw = [s.read_text() for s in srcs]
        flags = C.nvrtc_options(tc, arch, dirs)
        C._nvrtc_compile(tc, C.prepare_source(raw[0], "nvrtc", "warm.cu"), "warm.cu", flags)
        hdr, _ = timed(tc, C.prepare_source(headers_only(raw)), "h.cu", flags)
        single = [
            timed(tc, C.prepare_source(c, "nvrtc", s.name), s.name, flags)
            for s, c in zip(srcs, raw, strict=True)
        ]
        one = sum(t for t, _ in single)
        batched = 0.0
        for i in range(0, len(srcs), args.batch):
            members = [{"source": s.name, "text": c} for s, c in zip(srcs, raw, strict=True)]
            code = C.prepare_source(batch_text(members[i : i + args.batch]), "nvrtc", "batch.cu")
            batched += timed(tc, code, "batch.cu", flags)[0]
        n = len(srcs)
        print(
            f"{arch}: {n} sources; headers + empty kernel {hdr:.2f} s; one per program "
            f"{one:.2f} s ({one / n:.2f} s each); {args.batch} per program {batched:.2f} s "
            f"({batched / n:.2f} s each, {100 * (1 - batched / one):.0f} % less)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
