"""Read the target SM of a CUDA cubin (an ELF file) from its header, without CUDA tools.

Two encodings exist, told apart by e_ident[EI_OSABI] / e_ident[EI_ABIVERSION]
(checked against `cuobjdump --list-elf` / `cuobjdump -elf` of CUDA 13 on cubins from NVRTC 12.9):

- ABI 7 (OSABI 0x33 "CUDA"; sm_70 ... sm_90a):
    e_flags = virtual SM << 16 | 0x500 | SM, plus 0x800 for an "a" (arch-specific) target.
    sm_80 -> 0x00500550, sm_90 -> 0x005a055a, sm_90a -> 0x005a0d5a.
- ABI 8 (OSABI 0x41 "CUDA v2"; sm_100+ from CUDA 12.8/12.9, every SM from CUDA 13):
    e_flags = 0x06000000 | SM << 8 | low bits.
    CUDA 12.9: low bits 0x2, plus 0x8 for an "a" target (sm_100a -> 0x0600640a).
    CUDA 13.0: low bits 0x2 (sm_100+) or 0x4 (older SMs), never 0x8; the "a" lives in the
    `.nv.compat` section (sh_type 0x70000086) as attribute 9
    (EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET) = 1. sm_90a -> 0x06005a04 + that attribute.
("f" family targets such as sm_100f are marked nowhere: they read as plain sm_100, as in
cuobjdump.)
"""

from __future__ import annotations

import struct
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
ELFOSABI_CUDA = 0x33  # ABI version 7
ELFOSABI_CUDA_V2 = 0x41  # ABI version 8
EM_CUDA = 190
SHT_CUDA_COMPAT_INFO = 0x70000086
COMPAT_ACCELERATOR_TARGET = 9


def _read(path_or_bytes: str | Path | bytes | bytearray | memoryview) -> bytes:
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return bytes(path_or_bytes)
    return Path(path_or_bytes).read_bytes()


def _header(data: bytes) -> tuple[int, int, int, int]:
    """(osabi, abiversion, e_machine, e_flags) of a 64-bit little-endian cubin."""
    if len(data) < 64 or data[:4] != ELF_MAGIC:
        raise ValueError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    (e_machine,) = struct.unpack_from("<H", data, 18)
    (e_flags,) = struct.unpack_from("<I", data, 48)
    return data[7], data[8], e_machine, e_flags


def cubin_arch(path_or_bytes: str | Path | bytes | bytearray | memoryview) -> str:
    """The SASS target of a cubin: "sm_80", "sm_90a", "sm_100a", ..."""
    data = _read(path_or_bytes)
    osabi, abiver, machine, flags = _header(data)
    if machine != EM_CUDA:
        raise ValueError(f"ELF e_machine {machine} is not EM_CUDA ({EM_CUDA})")
    if osabi == ELFOSABI_CUDA and abiver == 7:
        sm, arch_specific = flags & 0xFF, bool(flags & 0x800)
    elif osabi == ELFOSABI_CUDA_V2 and abiver == 8:
        sm, arch_specific = (flags >> 8) & 0xFF, bool(flags & 0x8)
        arch_specific = arch_specific or _compat_attrs(data).get(COMPAT_ACCELERATOR_TARGET, 0) != 0
    else:
        raise ValueError(f"unknown cubin ELF ABI: osabi={osabi:#x} abiversion={abiver}")
    return f"sm_{sm}{'a' if arch_specific else ''}"


def _sections(data: bytes) -> list[tuple[str, int, bytes, int]]:
    """(name, sh_type, contents, sh_link) of every section."""
    (e_shoff,) = struct.unpack_from("<Q", data, 40)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 58)
    raw = [
        struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize) for i in range(e_shnum)
    ]
    shstr = raw[e_shstrndx][4]
    out = []
    for sh_name, sh_type, _, _, off, size, link, *_ in raw:
        name = data[shstr + sh_name : data.index(b"\0", shstr + sh_name)].decode()
        body = data[off : off + size] if sh_type != 8 else b""  # 8: SHT_NOBITS
        out.append((name, sh_type, body, link))
    return out


def _compat_attrs(data: bytes) -> dict[int, int]:
    """Scalar attributes of `.nv.compat`: entries are (format u8, attribute u8, ...) with
    format 1 = no value, 2/3 = u16 value, 4 = u16 size + that many bytes (skipped)."""
    attrs = {}
    for name, sh_type, body, _ in _sections(data):
        if sh_type != SHT_CUDA_COMPAT_INFO and name != ".nv.compat":
            continue
        i = 0
        while i + 4 <= len(body):
            fmt, attr, val = struct.unpack_from("<BBH", body, i)
            i += 4
            if fmt in (2, 3):
                attrs[attr] = val & 0xFF if fmt == 2 else val
            elif fmt == 4:
                i += val
            elif fmt != 1:
                break
    return attrs


def debug_sections(path_or_bytes: str | Path | bytes | bytearray | memoryview) -> list[str]:
    """Sections that carry debug info (-G, -lineinfo): none belong in a release build.
    `.debug_frame` (call frames, a few hundred bytes) is always emitted and not counted."""
    data = _read(path_or_bytes)
    _header(data)
    names = [name for name, *_ in _sections(data)]
    return [n for n in names if n.startswith((".debug_", ".nv_debug")) and n != ".debug_frame"]


def cubin_kernels(path_or_bytes: str | Path | bytes | bytearray | memoryview) -> list[str]:
    """Names of the kernels (global STT_FUNC symbols in `.text.<name>` sections), sorted."""
    data = _read(path_or_bytes)
    _header(data)
    sections = _sections(data)
    out = set()
    for _, sh_type, body, link in sections:
        if sh_type != 2:  # SHT_SYMTAB
            continue
        strtab = sections[link][2]
        for off in range(0, len(body), 24):
            st_name, st_info, _, st_shndx, _, _ = struct.unpack_from("<IBBHQQ", body, off)
            is_global_func = st_info & 0xF == 2 and st_info >> 4 == 1
            if is_global_func and 0 < st_shndx < len(sections):
                if sections[st_shndx][0].startswith(".text."):
                    out.add(strtab[st_name : strtab.index(b"\0", st_name)].decode())
    return sorted(out)


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:]:
        print(f"{arg}: {cubin_arch(arg)} {' '.join(cubin_kernels(arg))}")
