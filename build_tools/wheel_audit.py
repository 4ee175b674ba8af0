"""`python -m build_tools audit-wheel WHEEL`: the wheel bundles no CUDA library and needs none.

At run time tileaot needs only the NVIDIA driver, which libtileaot dlopen()s when first used
(DESIGN.md, "Must hold" 1). So no shared object in the wheel may name a CUDA, NVIDIA or torch
library in DT_NEEDED (not even libcuda.so.1: `import tileaot` must work without a driver), none
may be bundled (auditwheel repair would graft DT_NEEDED libraries into tileaot.libs/), and
RUNPATHs may only point inside the wheel ($ORIGIN), never at the build machine's toolkit.
And every shared object holds code for the CPU the wheel's platform tag names: a cross-built
aarch64 wheel (scripts/build_wheel_aarch64.sh) with an x86-64 library left in would install
on a Grace host and fail only at import.
System libraries on the manylinux policy's list stay allowed: libc, libm, libdl, libpthread,
libstdc++, libgcc_s, and libz.so.1, which libtileaot links to inflate its zlib-compressed
cubins (auditwheel leaves listed libraries out of the wheel).

Reads ELF files with pyelftools (installed with auditwheel).
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import zipfile
from dataclasses import dataclass

# The libraries a CUDA build could drag in: driver, runtime, compilers, math libs, torch.
FORBIDDEN = re.compile(
    r"^lib(cuda|cudart|nvrtc|nvrtc-builtins|nvJitLink|nvptxcompiler_static|cublas|cublasLt|"
    r"cufft|curand|cusparse|cusolver|cudnn|nccl|nvToolsExt|nvidia-ml|torch\w*|c10\w*)"
    r"(-[0-9a-f]{8})?\.so"  # auditwheel repair renames what it grafts: libnvrtc-6b3c1a2f.so.12
)


# ELF e_machine of the CPUs in Linux wheel platform tags (System V ABI, "e_machine" values).
MACHINES = {"x86_64": 62, "aarch64": 183}


@dataclass(frozen=True)
class ElfInfo:
    path: str  # inside the wheel
    needed: tuple[str, ...]
    runpath: tuple[str, ...]  # DT_RUNPATH and DT_RPATH entries
    machine: int = 0  # e_machine (0: not read)


def wheel_cpu(wheel: str) -> str | None:
    """The CPU a wheel's file name targets ("aarch64" for ..._manylinux_2_34_aarch64.whl), or
    None when its platform tag names none of MACHINES (a pure-Python or a macOS wheel)."""
    platform = wheel.rsplit("/", 1)[-1].removesuffix(".whl").rsplit("-", 1)[-1]
    first = platform.split(".")[0]  # compressed tag sets name one CPU: take the first
    return next((cpu for cpu in MACHINES if first.endswith("_" + cpu)), None)


def elf_machine(data: bytes) -> int:
    """e_machine of an ELF file: 2 bytes at offset 18, in the byte order EI_DATA gives."""
    return int.from_bytes(data[18:20], "little" if data[5] == 1 else "big")


def read_elf(path: str, data: bytes) -> ElfInfo | None:
    """DT_NEEDED and RUNPATH of an ELF shared object, or None if `data` is not ELF."""
    if not data.startswith(b"\x7fELF"):
        return None
    try:
        from elftools.elf.dynamic import DynamicSection
        from elftools.elf.elffile import ELFFile
    except ModuleNotFoundError:
        raise SystemExit("audit-wheel needs pyelftools: pip install auditwheel") from None
    needed, runpath = [], []
    for section in ELFFile(io.BytesIO(data)).iter_sections():
        if not isinstance(section, DynamicSection):
            continue
        for tag in section.iter_tags():
            if tag.entry.d_tag == "DT_NEEDED":
                needed.append(tag.needed)
            elif tag.entry.d_tag in ("DT_RUNPATH", "DT_RPATH"):
                text = tag.runpath if tag.entry.d_tag == "DT_RUNPATH" else tag.rpath
                runpath += [p for p in text.split(":") if p]
    return ElfInfo(path, tuple(needed), tuple(runpath), elf_machine(data))


def problems(elves: list[ElfInfo], names: list[str], cpu: str | None = None) -> list[str]:
    """What breaks the rule, one line each; [] when the wheel is clean. `cpu`: the wheel's
    (wheel_cpu), whose e_machine every shared object must have; None checks no machine."""
    out = []
    for name in names:
        base = name.rsplit("/", 1)[-1]
        if FORBIDDEN.match(base):
            out.append(f"{name}: a CUDA/torch library is bundled in the wheel")
    for elf in elves:
        out += [f"{elf.path}: needs {n} (DT_NEEDED)" for n in elf.needed if FORBIDDEN.match(n)]
        out += [
            f"{elf.path}: RUNPATH {p} points outside the wheel"
            for p in elf.runpath
            if not p.startswith("$ORIGIN")
        ]
        if cpu is not None and elf.machine != MACHINES[cpu]:
            out.append(
                f"{elf.path}: code for ELF machine {elf.machine}, but the wheel is for {cpu} "
                f"(machine {MACHINES[cpu]})"
            )
    return out


def audit(wheel: str) -> tuple[list[ElfInfo], list[str]]:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        elves = [read_elf(n, z.read(n)) for n in names if re.search(r"\.so(\.\d+)*$", n)]
    elves = [e for e in elves if e is not None]
    return elves, problems(elves, names, wheel_cpu(wheel))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m build_tools audit-wheel",
        description="Check that a wheel bundles and needs no CUDA/torch library, and that its "
        "shared objects are for the CPU its platform tag names.",
    )
    parser.add_argument("wheel")
    args = parser.parse_args(argv)
    elves, bad = audit(args.wheel)
    if not elves:
        print(
            f"error: {args.wheel} holds no shared objects (not a tileaot build?)", file=sys.stderr
        )
        return 1
    for elf in elves:
        runpath = ":".join(elf.runpath) or "-"
        print(
            f"{elf.path}: needs {', '.join(elf.needed) or '-'}; runpath {runpath}; "
            f"ELF machine {elf.machine}"
        )
    for line in bad:
        print(f"FORBIDDEN {line}", file=sys.stderr)
    if bad:
        print(
            "the wheel must need only the driver, loaded with dlopen at run time, and hold "
            "code for the CPU its tag names",
            file=sys.stderr,
        )
        return 1
    cpu = wheel_cpu(args.wheel)
    where = f" for {cpu} (ELF machine {MACHINES[cpu]})" if cpu else ""
    print(
        f"audit-wheel: {len(elves)} shared objects{where}, no CUDA/torch library bundled or needed"
    )
    return 0
