"""`python -m build_tools generate`: trace the matrix and write the gen folder.

Writes (write-if-different, deterministic): src/<variant>.<hash8>.cu, manifest.json,
registry.cpp, cubins.cmake. See docs/ARCHITECTURE.md for the layout.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from build_tools.emit_cpp import emit_registry
from build_tools.matrix import ARCH_ORDER, VariantPoint, enumerate_variants

GEN_FORMAT = 1


def write_if_different(path: Path, text: str) -> bool:
    """Write only when the content changes, so the build's timestamps stay meaningful."""
    data = text.encode()
    if path.exists() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


def arch_parts(arch: str) -> tuple[int, int, bool]:
    """'sm_90a' → (9, 0, True); 'sm_86' → (8, 6, False)."""
    digits = arch[3:].rstrip("a")
    return int(digits[:-1]), int(digits[-1]), arch.endswith("a")


def load_specs(module: str = "kernels_py"):
    """The KernelSpecs of `module` (its all_specs()); tests use small modules of their own."""
    import importlib

    return importlib.import_module(module).all_specs()


def _trace_job(module: str, op: str, key: dict, specialisation: dict, arch: str):
    """Runs in a worker process: trace one (variant, arch)."""
    from build_tools.trace import trace

    spec = next(s for s in load_specs(module) if s.op == op)
    point = VariantPoint(spec, key, specialisation, (arch,))
    try:
        sig, lowered = trace(point, arch)
    except Exception as exc:  # TVM errors do not pickle across the process pool
        import traceback

        detail = "".join(traceback.format_exception(exc))
        raise RuntimeError(f"tracing {point.name} for {arch} failed:\n{detail}") from None
    sig_data = asdict(sig)
    sig_data["text"] = sig.text()
    # Through JSON: TVM's string and int subclasses do not pickle across processes.
    return json.loads(json.dumps([sig_data, lowered]))


def _trace_all(points: list[VariantPoint], jobs: int, module: str, cache: Path) -> dict:
    work = [(p, a) for p in points for a in p.archs]
    args = [[module, p.spec.op, dict(p.key), dict(p.specialisation), a] for p, a in work]
    keys = [_cache_key(p, job) for (p, _), job in zip(work, args, strict=True)]
    results = [_cache_get(cache, k) for k in keys]
    todo = [i for i, r in enumerate(results) if r is None]
    if todo:
        todo_args = [args[i] for i in todo]
        if jobs <= 1 or len(todo) == 1:
            fresh = [_trace_job(*a) for a in todo_args]
        else:
            fresh = _trace_in_subprocesses(todo_args, min(jobs, len(todo)))
        for i, result in zip(todo, fresh, strict=True):
            results[i] = result
            _cache_put(cache, keys[i], result)
    print(f"tileaot generate: traced {len(todo)}, cached {len(work) - len(todo)}", file=sys.stderr)
    return {(p.name, a): r for (p, a), r in zip(work, results, strict=True)}


def _cache_key(point: VariantPoint, job: list) -> str:
    """Everything a trace depends on: the job, the op's source file, build_tools' tracer and
    emitter-facing code, and the tilelang version."""
    import inspect
    from importlib.metadata import version

    digest = hashlib.sha256(json.dumps(job, sort_keys=True).encode())
    digest.update(Path(inspect.getfile(point.spec.factory)).read_bytes())
    for name in ("trace.py", "cexpr.py"):
        digest.update((Path(__file__).parent / name).read_bytes())
    digest.update(version("tilelang").encode())
    return digest.hexdigest()


def _cache_get(cache: Path, key: str):
    path = cache / f"{key}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _cache_put(cache: Path, key: str, result) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    write_if_different(cache / f"{key}.json", json.dumps(result))


def _trace_in_subprocesses(args: list, jobs: int) -> list:
    """Round-robin the jobs over `jobs` fresh interpreters (`python -m build_tools _trace`).

    Not multiprocessing: TVM objects crash a pool worker when its frames are torn down, and a
    plain subprocess per chunk is as fast and keeps each failure's output readable.
    """
    import subprocess
    import tempfile

    chunks = [args[i::jobs] for i in range(jobs)]
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for i, chunk in enumerate(chunks):
            out = Path(tmp) / f"{i}.json"
            cmd = [sys.executable, "-m", "build_tools", "_trace", str(out)]
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, text=True)
            proc.stdin.write(json.dumps(chunk))
            proc.stdin.close()
            procs.append((proc, out))
        failed = [p.args for p, _ in procs if p.wait() != 0]
        if failed:
            raise SystemExit(f"tracing failed in {len(failed)} worker(s); see the output above")
        per_chunk = [json.loads(out.read_text()) for _, out in procs]
    results = [None] * len(args)
    for i, chunk_results in enumerate(per_chunk):
        results[i::jobs] = chunk_results
    return results


def trace_worker(out: str) -> int:
    """Entry of `python -m build_tools _trace OUT`: jobs as JSON on stdin, results to OUT."""
    jobs = json.loads(sys.stdin.read())
    Path(out).write_text(json.dumps([_trace_job(*job) for job in jobs]))
    return 0


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
    out: Path, module: str, archs: tuple[str, ...], ops: tuple[str, ...], jobs: int
) -> dict:
    points = enumerate_variants(load_specs(module), archs, ops)
    if not points:
        raise SystemExit(f"no variants match ops={','.join(ops)} archs={','.join(archs)}")
    # Beside the gen folder, not in it: gen folders are carried to GPU machines.
    cache = Path(os.environ.get("TILEAOT_TRACE_CACHE", out.parent / ".trace-cache"))
    traced = _trace_all(points, jobs, module, cache)
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
    manifest = _manifest(rows, blobs, units, ordered, archs, ops)
    write_if_different(out / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    _remove_stale(out, {units[u]["source"] for u in ordered})
    return manifest


def _manifest(rows, blobs, units, ordered, archs, ops) -> dict:
    from importlib.metadata import version

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
        "tilelang": version("tilelang"),
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

    archs, ops = parse_archs(args.archs), parse_ops(args.ops)
    manifest = generate(Path(args.out), args.specs, archs, ops, args.jobs)
    n_var = len({v["name"] for v in manifest["variants"]})
    print(
        f"tileaot generate: {n_var} variants, {len(manifest['variants'])} (variant, arch) rows, "
        f"{len(manifest['cubins'])} cubins to compile → {args.out}",
        file=sys.stderr,
    )
    return 0
