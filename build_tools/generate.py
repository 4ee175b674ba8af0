"""`python -m build_tools generate`: trace the matrix and write the gen folder.

Writes (write-if-different, deterministic): src/<variant>.<hash8>.cu, manifest.json,
registry.cpp, cubins.cmake; beside them stats/trace.json (timings for the build report) and,
for `--shard i/n`, shard/ (what `merge` needs). See docs/ARCHITECTURE.md for the layout.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from importlib.metadata import version
from pathlib import Path

from build_tools.cache import Cache
from build_tools.emit_cpp import emit_registry
from build_tools.emit_ops_hpp import emit_ops_hpp
from build_tools.fsutil import write_if_different
from build_tools.matrix import ARCH_ORDER, enumerate_variants
from build_tools.schema_check import schema_of
from build_tools.specs import load_specs
from build_tools.tracing import trace_all

GEN_FORMAT = 1


def arch_parts(arch: str) -> tuple[int, int, bool]:
    """'sm_90a' → (9, 0, True); 'sm_86' → (8, 6, False)."""
    digits = arch[3:].rstrip("a")
    return int(digits[:-1]), int(digits[-1]), arch.endswith("a")


def _compile_units(points, traced):
    """Group identical sources: one cubin per (source, SASS family); 'a' archs stand alone.

    Returns (units: {(hash, compile_arch): info}, arch_unit: {(variant, arch): (hash, c_arch)}).
    """
    groups: dict[tuple, list[str]] = {}
    for p in points:
        for arch in p.archs:
            source = traced[(p.name, arch)][1]["source"]
            digest = hashlib.sha256(source.encode()).hexdigest()[:12]
            major, _, specific = arch_parts(arch)
            family = (digest, arch if specific else major)
            groups.setdefault(family, []).append((p.name, arch, source))
    units, arch_unit = {}, {}
    for (digest, _), members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        compile_arch = min((a for _, a, _ in members), key=ARCH_ORDER.__getitem__)
        name = members[0][0]
        units[(digest, compile_arch)] = {
            "source": f"src/{name}.{digest}.cu",
            "text": members[0][2],
            "arch": compile_arch,
            "cubin": f"cubin/{name}.{digest}.{compile_arch}.cubin",
        }
        for variant, arch, _ in members:
            arch_unit[(variant, arch)] = (digest, compile_arch)
    return units, arch_unit


def _rows(points, traced, arch_unit, blob_index):
    rows = []
    for p in points:
        for arch in p.archs:
            sig, lowered = traced[(p.name, arch)]
            major, minor, specific = arch_parts(arch)
            rows.append(
                {
                    "name": p.name,
                    "op": p.spec.op,
                    "key": p.key_string,
                    "spec": p.name.split("_")[-1]
                    if p.generic
                    else "_".join(f"{k.lower()}{v}" for k, v in p.specialisation.items()),
                    "arch": arch,
                    "major": major,
                    "minor": minor,
                    "specific": specific,
                    "blob": blob_index[arch_unit[(p.name, arch)]],
                    "signature": sig,
                    "signature_text": sig["text"],
                    "constraints": p.spec.constraints(p.key, p.specialisation),
                    "kernels": lowered["kernels"],
                    "generic": p.generic,
                }
            )
    # op, key, specialised before generic, then newest arch first: the runtime's search order.
    rows.sort(key=lambda r: (r["op"], r["key"], r["generic"], r["name"], -ARCH_ORDER[r["arch"]]))
    return rows


def generate(
    out: Path,
    module: str,
    archs: tuple[str, ...],
    ops: tuple[str, ...],
    jobs: int,
    shard: tuple[int, int] | None = None,
    cache: Cache | None = None,
) -> dict:
    """Trace the matrix (or shard i of n of it) and write the gen folder `out`."""
    from build_tools.schema_check import check_all as check_schemas  # noqa: I001 - lazy, as shard
    from build_tools.shard import select_shard, write_shard_data

    points = enumerate_variants(load_specs(module), archs, ops)
    if not points:
        raise SystemExit(f"no variants match ops={','.join(ops)} archs={','.join(archs)}")
    if shard is not None:
        points = select_shard(points, *shard)
    traced, stats = trace_all(points, jobs, module, cache or Cache())
    check_schemas(points, traced)
    write_trace_stats(out, stats)
    if shard is not None:
        write_shard_data(out, shard, module, archs, ops, points, traced)
    else:  # a whole matrix now: what `merge` would read from here is stale
        shutil.rmtree(out / "shard", ignore_errors=True)
    return write_gen(out, points, traced, archs, ops, version("tilelang"))


def write_gen(out: Path, points, traced: dict, archs, ops, tilelang_version: str) -> dict:
    """Emit sources, registry.cpp, cubins.cmake and manifest.json from traced data."""
    units, arch_unit = _compile_units(points, traced)
    ordered = sorted(units, key=lambda u: units[u]["cubin"])
    blob_index = {u: i for i, u in enumerate(ordered)}
    blobs = [
        {"symbol": f"tileaot_blob_{i}", "arch": units[u]["arch"], "cubin": units[u]["cubin"]}
        for i, u in enumerate(ordered)
    ]
    rows = _rows(points, traced, arch_unit, blob_index)
    for u in ordered:
        write_if_different(out / units[u]["source"], units[u]["text"])
    build_archs, build_ops = ",".join(archs), ",".join(ops)
    write_if_different(out / "registry.cpp", emit_registry(rows, blobs, build_archs, build_ops))
    cmake_entries = [
        f'  "{units[u]["source"]}|{units[u]["arch"]}|{units[u]["cubin"]}|tileaot_blob_{i}"'
        for i, u in enumerate(ordered)
    ]
    write_if_different(
        out / "cubins.cmake",
        "# Generated by build_tools: source|compile arch|cubin|embedded symbol\n"
        "set(TILEAOT_CUBINS\n" + "\n".join(cmake_entries) + "\n)\n",
    )
    schemas = [x for x in (schema_of(op) for op in sorted({r["op"] for r in rows})) if x]
    write_if_different(out / "ops.hpp", emit_ops_hpp(schemas))
    from build_tools.progress import note

    note(f"compile-total {len(ordered)}")  # for `build_tools watch`: one "compiled" line each
    manifest = _manifest(rows, blobs, units, ordered, archs, ops, tilelang_version)
    write_if_different(out / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    _remove_stale(out, {units[u]["source"] for u in ordered})
    return manifest


def write_trace_stats(out: Path, stats: dict) -> None:
    """stats/trace.json: seconds and cache hit per (variant, arch), for the build report.
    Kept apart from the generated files, which stay byte-identical between runs."""
    rows = {f"{name}@{arch}": s for (name, arch), s in sorted(stats.items())}
    write_if_different(out / "stats" / "trace.json", json.dumps(rows, indent=1) + "\n")


def _manifest(rows, blobs, units, ordered, archs, ops, tilelang_version: str) -> dict:
    variants = [
        {k: r[k] for k in ("name", "op", "key", "spec", "arch", "blob", "constraints", "kernels")}
        | {
            "signature": r["signature_text"],
            "params": r["signature"]["params"],
            "blob_arch": blobs[r["blob"]]["arch"],
        }
        for r in rows
    ]
    cubins = [
        {
            "symbol": b["symbol"],
            "source": units[u]["source"],
            "arch": b["arch"],
            "cubin": b["cubin"],
        }
        for b, u in zip(blobs, ordered, strict=True)
    ]
    return {
        "format": GEN_FORMAT,
        "tilelang": tilelang_version,
        "archs": list(archs),
        "ops": list(ops),
        "variants": variants,
        "cubins": cubins,
    }


def _remove_stale(out: Path, keep: set[str]) -> None:
    """Sources of variants no longer in the matrix would otherwise linger in src/."""
    for path in (out / "src").glob("*.cu"):
        if f"src/{path.name}" not in keep:
            path.unlink()


def main(args) -> int:
    from build_tools.matrix import parse_archs, parse_ops
    from build_tools.shard import parse_shard

    archs, ops = parse_archs(args.archs), parse_ops(args.ops)
    shard = parse_shard(args.shard) if args.shard else None
    manifest = generate(Path(args.out), args.specs, archs, ops, args.jobs, shard)
    n_var = len({v["name"] for v in manifest["variants"]})
    print(
        f"tileaot generate: {n_var} variants, {len(manifest['variants'])} (variant, arch) rows, "
        f"{len(manifest['cubins'])} cubins to compile → {args.out}",
        file=sys.stderr,
    )
    return 0
