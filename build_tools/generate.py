"""`python -m build_tools generate`: trace the matrix and write the gen folder.

Writes (write-if-different, deterministic): src/<variant>.<hash8>.cu (or, for the sources of
one op and arch compiled as one program, src/<op>.x<n>.<hash8>.cu), manifest.json,
registry.cpp, cubins.cmake; beside them stats/trace.json (timings for the build report) and,
for `--shard i/n`, shard/ (what `merge` needs). See docs/ARCHITECTURE.md for the layout.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from importlib.metadata import version
from pathlib import Path

from build_tools.cache import Cache
from build_tools.emit_cpp import emit_registry
from build_tools.emit_ops_hpp import emit_ops_hpp, emit_workspace_cpp
from build_tools.fsutil import write_if_different
from build_tools.matrix import ARCH_ORDER, enumerate_variants
from build_tools.schema_check import schemas_of
from build_tools.specs import load_specs
from build_tools.tracing import trace_all

GEN_FORMAT = 1


def arch_parts(arch: str) -> tuple[int, int, str]:
    """'sm_90a' → (9, 0, "a"); 'sm_100f' → (10, 0, "f"); 'sm_86' → (8, 6, "");
    'compute_80' (PTX) → (8, 0, "ptx")."""
    if arch.startswith("compute_"):
        digits, kind = arch.removeprefix("compute_"), "ptx"
    else:
        digits = arch[3:].rstrip("af")
        kind = arch[3 + len(digits) :]
    return int(digits[:-1]), int(digits[-1]), kind


def ptx_arch(arch: str) -> str:
    """The PTX target for the source traced for `arch`: 'sm_80' → 'compute_80'."""
    return "compute_" + arch[3:].rstrip("af")


def default_ptx(archs) -> tuple[str, ...]:
    """The forward path: PTX of the sm_80-traced sources (no TMA, no wgmma) when sm_80 is
    built; a build without sm_80 embeds no PTX unless asked (--ptx)."""
    return ("sm_80",) if "sm_80" in archs else ()


def _order(arch: str) -> int:
    """Table order: SASS targets newest first (ARCH_ORDER), then PTX, newest first."""
    if arch.startswith("compute_"):
        return -int(arch.removeprefix("compute_"))
    return -1000 - ARCH_ORDER[arch]


def _compile_units(points, traced, ptx=()):
    """Group identical sources: one cubin per (source, SASS major) for plain targets; "a" and
    "f" targets stand alone (their SASS may use what the plain one cannot); one PTX file per
    source traced for a `ptx` arch (compute_80 for sm_80's).

    Returns (units: {(hash, compile_arch): info}, arch_unit: {(variant, arch): (hash, c_arch)}),
    arch being the row's ("sm_80", or "compute_80" for a PTX row).
    """
    groups: dict[tuple, list[str]] = {}
    for p in points:
        for arch in p.archs:
            source = traced[(p.name, arch)][1]["source"]
            digest = hashlib.sha256(source.encode()).hexdigest()[:12]
            major, _, kind = arch_parts(arch)
            family = (digest, arch if kind else major)
            groups.setdefault(family, []).append((p.name, arch, source))
            if arch in ptx:
                groups.setdefault((digest, ptx_arch(arch)), []).append(
                    (p.name, ptx_arch(arch), source)
                )
    units, arch_unit = {}, {}
    for (digest, _), members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        compile_arch = min((a for _, a, _ in members), key=lambda a: -_order(a))
        name = members[0][0]
        ext = "ptx" if compile_arch.startswith("compute_") else "cubin"
        units[(digest, compile_arch)] = {
            "variant": name,
            "source": f"src/{name}.{digest}.cu",
            "text": members[0][2],
            "arch": compile_arch,
            "cubin": f"{ext}/{name}.{digest}.{compile_arch}.{ext}",
        }
        for variant, arch, _ in members:
            arch_unit[(variant, arch)] = (digest, compile_arch)
    return units, arch_unit


# Sources of one op and one arch are compiled together, up to this many per NVRTC program
# (TILEAOT_BATCH_MAX; 1: one program per source). Most of a compile is NVRTC parsing the
# tl_templates/CUTLASS headers, ~0.75 s of a ~0.85 s sm_90a compile, paid once per program:
# 16 sources in one program take ~0.1 s each (bench/results/build-2026-12-04.md).
BATCH_MAX = 16
_KERNEL = re.compile(r'^extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(', re.M)
_DEVICE_FN = re.compile(
    r"^(?:static )?(?:__device__|__host__|__forceinline__|inline)[^(;{]*?(\w+)\(", re.M
)


def batch_max() -> int:
    text = os.environ.get("TILEAOT_BATCH_MAX", "")
    if not text:
        return BATCH_MAX
    if not text.isdigit() or int(text) < 1:
        raise SystemExit(
            f"TILEAOT_BATCH_MAX={text!r}: expected a whole number >= 1 (1: no batching)"
        )
    return int(text)


_EXTERN_SHARED = re.compile(r"^[ \t]*extern __shared__ ([^;\n]*?)\b(\w+)\[\];", re.M)


def defined_names(source: str) -> dict[str, str | None]:
    """Names a generated source declares at file scope, for telling which sources may share a
    program: its kernels and top-level device functions (None: any other use of the name
    clashes) and its dynamic shared memory arrays (`extern __shared__`, file-scope entities
    even when declared in a kernel: the declaration, which must then be the same)."""
    names: dict[str, str | None] = {m[1]: m[0].strip() for m in _EXTERN_SHARED.findall(source)}
    return names | dict.fromkeys([*_KERNEL.findall(source), *_DEVICE_FN.findall(source)])


def _clash(a: dict, b: dict) -> bool:
    return any(a[n] is None or a[n] != b[n] for n in a.keys() & b.keys())


def batch_text(members: list[dict]) -> str:
    """One program of several sources: each under `#line 1` of its own name (diagnostics
    name the variant's source), in the batch's order."""
    return "".join(f'#line 1 "{m["source"].removeprefix("src/")}"\n{m["text"]}\n' for m in members)


def _batch_units(units: dict, arch_unit: dict, op_of: dict, limit: int):
    """Group the compile units of one op and one arch into batches of at most `limit`
    sources whose defined names do not clash (first fit, in cubin-name order: deterministic).
    A batch of one stays the unit it was. PTX (compute_80) is batched the same way: the
    driver JIT-compiles a PTX module whole, so the forward path's first call of an op pays
    for the op's batch (once per process; the driver's compute cache keeps the result).
    Returns (units, arch_unit) with batch keys ("batch", digest, arch)."""
    groups: dict[tuple, list[list]] = {}
    for key in sorted(units, key=lambda k: units[k]["cubin"]):
        u = units[key]
        slot = (op_of[u["variant"]], u["arch"])
        names = defined_names(u["text"])
        batches = groups.setdefault(slot, [])
        for b in batches:
            if len(b[0]) < limit and not _clash(b[1], names):
                b[0].append(key)
                b[1] |= names
                break
        else:
            batches.append([[key], names])
    out, remap = {}, {}
    for (op, _), batches in sorted(groups.items(), key=lambda kv: str(kv[0])):
        for keys, _ in batches:
            if len(keys) == 1:
                out[keys[0]] = units[keys[0]]
                continue
            arch = units[keys[0]]["arch"]
            text = batch_text([units[k] for k in keys])
            digest = hashlib.sha256(text.encode()).hexdigest()[:12]
            name, ext = f"{op}.x{len(keys)}", units[keys[0]]["cubin"].split("/")[0]
            bkey = ("batch", digest, arch)
            out[bkey] = {
                "variant": units[keys[0]]["variant"],
                "source": f"src/{name}.{digest}.cu",
                "text": text,
                "arch": arch,
                "cubin": f"{ext}/{name}.{digest}.{arch}.{ext}",
                "members": [units[k]["source"] for k in keys],
            }
            remap.update(dict.fromkeys(keys, bkey))
    return out, {row: remap.get(u, u) for row, u in arch_unit.items()}


def _rows(points, traced, arch_unit, blob_index, ptx=()):
    rows = []
    for p in points:
        row_archs = [(a, a) for a in p.archs] + [(ptx_arch(a), a) for a in p.archs if a in ptx]
        for arch, traced_arch in row_archs:
            sig, lowered = traced[(p.name, traced_arch)]
            major, minor, kind = arch_parts(arch)
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
                    "kind": kind,
                    "blob": blob_index[arch_unit[(p.name, arch)]],
                    "signature": sig,
                    "signature_text": sig["text"],
                    "constraints": p.spec.constraints(p.key, p.specialisation),
                    "kernels": lowered["kernels"],
                    "generic": p.generic,
                }
            )
    # op, key, specialised before generic, then newest arch first (PTX after SASS): the
    # runtime's search order.
    rows.sort(key=lambda r: (r["op"], r["key"], r["generic"], r["name"], _order(r["arch"])))
    return rows


def generate(
    out: Path,
    module: str,
    archs: tuple[str, ...],
    ops: tuple[str, ...],
    jobs: int,
    shard: tuple[int, int] | None = None,
    cache: Cache | None = None,
    ptx: tuple[str, ...] | None = None,
) -> dict:
    """Trace the matrix (or shard i of n of it) and write the gen folder `out`."""
    from build_tools.schema_check import check_all as check_schemas  # noqa: I001 - lazy, as shard
    from build_tools.shard import select_shard, write_shard_data

    from build_tools.userconfig import from_env  # $TILEAOT_CONFIG: how CMake passes a config

    points = enumerate_variants(load_specs(module), archs, ops, from_env())
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
    return write_gen(out, points, traced, archs, ops, version("tilelang"), ptx)


def write_gen(out: Path, points, traced: dict, archs, ops, tilelang_version: str, ptx=None) -> dict:
    """Emit sources, registry.cpp, cubins.cmake and manifest.json from traced data. `ptx`:
    the archs whose traced sources are also embedded as PTX (None: default_ptx)."""
    ptx = tuple(default_ptx(archs) if ptx is None else ptx)
    missing = [a for a in ptx if a not in archs]
    if missing:
        raise SystemExit(
            f"tileaot generate: PTX of {','.join(missing)} asked for (--ptx / TILEAOT_PTX_ARCHS)"
            f" but not built: add {';'.join(a[3:] for a in missing)} to the archs "
            f"({','.join(archs)})"
        )
    units, arch_unit = _compile_units(points, traced, ptx)
    op_of = {p.name: p.spec.op for p in points}
    units, arch_unit = _batch_units(units, arch_unit, op_of, batch_max())
    ordered = sorted(units, key=lambda u: units[u]["cubin"])
    blob_index = {u: i for i, u in enumerate(ordered)}
    blobs = [
        {"symbol": f"tileaot_blob_{i}", "arch": units[u]["arch"], "cubin": units[u]["cubin"]}
        for i, u in enumerate(ordered)
    ]
    rows = _rows(points, traced, arch_unit, blob_index, ptx)
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
    schemas = schemas_of(points, {r["op"] for r in rows})
    write_if_different(out / "ops.hpp", emit_ops_hpp(schemas))
    write_if_different(out / "workspace.cpp", emit_workspace_cpp(schemas))
    from build_tools.progress import note

    note(f"compile-total {len(ordered)}")  # for `build_tools watch`: one "compiled" line each
    manifest = _manifest(rows, blobs, units, ordered, archs, ops, tilelang_version)
    manifest["ptx"] = [ptx_arch(a) for a in ptx]
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
        | ({"members": units[u]["members"]} if "members" in units[u] else {})
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
    from build_tools.archs import parse_ptx_archs
    from build_tools.matrix import parse_archs, parse_ops
    from build_tools.shard import parse_shard

    archs, ops = parse_archs(args.archs), parse_ops(args.ops)
    shard = parse_shard(args.shard) if args.shard else None
    ptx = None if args.ptx == "auto" else tuple(parse_ptx_archs(args.ptx, "--ptx"))
    manifest = generate(Path(args.out), args.specs, archs, ops, args.jobs, shard, ptx=ptx)
    n_var = len({v["name"] for v in manifest["variants"]})
    print(
        f"tileaot generate: {n_var} variants, {len(manifest['variants'])} (variant, arch) rows, "
        f"{len(manifest['cubins'])} cubins to compile → {args.out}",
        file=sys.stderr,
    )
    return 0
