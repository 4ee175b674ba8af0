"""Pack a cubin into the blob libtileaot embeds: zlib-compressed when that makes it smaller.

A packed blob file is an 8-byte header and a payload:

    bytes 0-7   inflated size, little-endian u64: the cubin's size when the payload is its
                zlib stream (level 9), or 0 when the payload is the cubin as is
    bytes 8-    the payload

cmake/TileaotCubins.cmake embeds each blob with two `.incbin`s: the header as the symbol
`tileaot_blob_N_inflated_size`, the payload as `tileaot_blob_N` (the generated registry's
`Blob` entry points at both; cpp/runtime/registry.h). At run time the runtime inflates a
compressed payload into a temporary buffer right before the driver loads it
(cpp/runtime/blob.cpp). Packing is deterministic: the same cubin gives the same bytes (with
one zlib build: another zlib may compress differently).

CMake runs `python -m build_tools.blob CUBIN -o BLOB` once per cubin, into the build folder
(this module imports little, so each process starts fast; `python -m build_tools pack` is the
same command). Cubins compiled by CMake and prebuilt ones (TILEAOT_PREBUILT_CUBINS=ON) are
packed alike; the gen folder keeps the plain cubins.
"""

from __future__ import annotations

import argparse
import re
import struct
import sys
import zlib
from pathlib import Path

from build_tools.cache import write_atomic

HEADER = struct.Struct("<Q")
LEVEL = 9
# A zlib stream of ours starts with CMF 0x78 (deflate, 32 KiB window) and, at level 9, FLG 0xDA.
_ZLIB_LEVEL9 = b"\x78\xda"
_ELF_MAGIC = b"\x7fELF"


def pack(cubin: bytes, compress: bool = True) -> bytes:
    """The blob file for `cubin`: header + zlib stream if that is smaller, else header + cubin.
    `compress=False` always stores the cubin as is (a build without zlib)."""
    if compress:
        stream = zlib.compress(cubin, LEVEL)
        if len(stream) < len(cubin):
            return HEADER.pack(len(cubin)) + stream
    return HEADER.pack(0) + cubin


def unpack(blob: bytes) -> bytes:
    """The cubin a blob file holds (what the runtime hands the driver). ValueError if the blob
    is truncated, does not inflate, or inflates to another size than its header says."""
    if len(blob) < HEADER.size:
        raise ValueError(f"a blob has an {HEADER.size}-byte header; got {len(blob)} bytes")
    (size,) = HEADER.unpack_from(blob)
    payload = blob[HEADER.size :]
    if size == 0:
        return payload
    try:
        cubin = zlib.decompress(payload)
    except zlib.error as e:
        raise ValueError(f"the blob's zlib stream is corrupt: {e}") from None
    if len(cubin) != size:
        raise ValueError(f"the blob inflates to {len(cubin)} bytes, its header says {size}")
    return cubin


def write_if_different(path: Path, data: bytes) -> bool:
    """Write `data` to `path` atomically unless it holds it already (then its mtime stays, so
    what depends on it is not rebuilt); True if written."""
    if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
        return False
    write_atomic(path, data)
    return True


def _elf_size(image: memoryview) -> int:
    """The length of a 64-bit ELF image: where its section or program header table ends,
    whichever is last (cubins end with one of them)."""
    phoff, shoff = struct.unpack_from("<QQ", image, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", image, 0x36)
    return max(phoff + phentsize * phnum, shoff + shentsize * shnum)


def embedded_cubins(library: bytes) -> list[bytes]:
    """Every cubin embedded in a built libtileaot.so's bytes, stored or compressed: for tests
    and tools that check the machine code a library carries (e.g. its archs). Finds zlib
    streams that inflate to an ELF image, and ELF images after the library's own header."""
    view = memoryview(library)  # slices of a view copy nothing
    out = []
    for m in re.finditer(re.escape(_ELF_MAGIC), library):
        if m.start() > 0 and len(library) - m.start() >= 64:  # 0: the library's own header
            out.append(bytes(view[m.start() : m.start() + _elf_size(view[m.start() :])]))
    for m in re.finditer(re.escape(_ZLIB_LEVEL9), library):
        try:
            # A dynamic Huffman block's code tables come first: give it room to reach the data.
            head = zlib.decompressobj().decompress(view[m.start() : m.start() + 4096], 4)
            if head != _ELF_MAGIC:
                continue
            inflater = zlib.decompressobj()
            cubin = inflater.decompress(view[m.start() :])
        except zlib.error:
            continue
        if inflater.eof:
            out.append(cubin)
    return out


def embedded_ptx(library: bytes) -> list[bytes]:
    """Every PTX text embedded in a built libtileaot.so (the forward path, the PTX test mode):
    zlib streams that inflate to NVRTC's PTX header, and stored ones (up to their NUL)."""
    view = memoryview(library)
    out = []
    for m in re.finditer(re.escape(_ZLIB_LEVEL9), library):
        try:
            head = zlib.decompressobj().decompress(view[m.start() : m.start() + 4096], 2)
            if head != b"//":
                continue
            inflater = zlib.decompressobj()
            text = inflater.decompress(view[m.start() :])
        except zlib.error:
            continue
        if inflater.eof and b"\n.target " in text:
            out.append(text)
    for m in re.finditer(rb"//\n// Generated by NVIDIA NVVM Compiler", library):
        end = library.find(b"\0", m.start())
        out.append(bytes(view[m.start() : end + 1]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m build_tools pack",
        description="Pack a cubin into the blob libtileaot embeds (zlib when smaller).",
    )
    parser.add_argument("cubin", type=Path)
    parser.add_argument("-o", "--out", type=Path, required=True, help="the blob file to write")
    parser.add_argument("--store", action="store_true", help="never compress (no zlib)")
    args = parser.parse_args(argv)
    try:
        write_if_different(args.out, pack(args.cubin.read_bytes(), compress=not args.store))
    except OSError as e:
        print(f"error: packing {args.cubin}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
