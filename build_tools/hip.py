"""`python -m build_tools hip`: HIP sources for AMD GPUs (gfx90a, gfx942) and their manifest.

Every variant of the CUDA matrix (build_tools/matrix.py) is lowered again with TileLang's HIP
backend, ``Target({"kind": "hip", "mcpu": "gfx942"})``, which needs no ROCm install. The factory
gets the gfx arch as ``arch``; a factory or lowering that fails (CUDA-only instruction paths,
HIP codegen limits) is recorded in the manifest with its error instead of stopping the build:
which ops HIP can serve is itself an output. Launch facts come from build_tools/trace.py, the
same extraction the CUDA build uses.

Writes, deterministic and write-if-different:
  OUT/src/<variant>.<hash12>.hip   device source; identical sources of several archs share one
  OUT/manifest.json                one row per (variant, arch): source, code object, kernels
                                   with launch facts, or "error"
  OUT/workspace.cpp                the C ABI's `tileaot_workspace_size` for the ops with a
                                   lowered row, from their schemas, as the CUDA build writes it
                                   (build_tools/emit_ops_hpp.py): a HIP library compiles it in
and, when `hipcc` is found (or --compile always), OUT/co/<variant>.<hash12>.<arch>.hsaco code
objects for hipModuleLoadData (cpp/runtime/hip_driver.h). See docs/HIP.md.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

from build_tools import work_queue
from build_tools.emit_ops_hpp import emit_workspace_cpp
from build_tools.fsutil import write_if_different
from build_tools.matrix import VariantPoint, enumerate_variants, parse_ops
from build_tools.progress import Progress
from build_tools.schema_check import schemas_of
from build_tools.specs import load_specs
from kernels_py.spec import DEFAULT_ARCHS

HIP_ARCHS = ("gfx90a", "gfx942")  # CDNA2 (MI200) and CDNA3 (MI300)
MANIFEST_FORMAT = 1


def parse_hip_archs(text: str) -> tuple[str, ...]:
    """'gfx942;gfx90a' → ('gfx90a', 'gfx942'), validated and in canonical order."""
    archs = {a.strip() for a in text.replace(";", ",").split(",") if a.strip()}
    unknown = sorted(archs - set(HIP_ARCHS))
    if unknown:
        raise ValueError(f"unknown HIP arch {unknown[0]!r}: tileaot emits HIP for {HIP_ARCHS}")
    if not archs:
        raise ValueError("no HIP archs selected")
    return tuple(a for a in HIP_ARCHS if a in archs)


def hip_points(module: str, ops: tuple[str, ...]) -> list[VariantPoint]:
    """The variants of the CUDA matrix (those some CUDA arch builds): `supports` speaks of CUDA
    archs, so whether a variant works on a gfx arch is found by lowering it."""
    from build_tools.userconfig import from_env

    return enumerate_variants(load_specs(module), DEFAULT_ARCHS, ops, from_env())


# ---------------------------------------------------------------------------------------------
# Lowering (runs in work_queue worker processes)
# ---------------------------------------------------------------------------------------------


def lower_hip(func, arch: str):
    import tilelang
    from tilelang import tvm
    from tvm.target import Target

    target = Target({"kind": "hip", "mcpu": arch})
    with tvm.transform.PassContext(opt_level=3), target:
        return tilelang.lower(func, target=target)


# TVM prints an unlowered intrinsic as its whole ir.Op(...) repr; its name is what matters.
_OP_REPR = re.compile(r'ir\.Op\(.*?name="([^"]+)".*?\)$')


def _one_line(error: BaseException) -> str:
    """The exception's last non-empty line: TVM puts its C++ backtrace before the reason."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    last = _OP_REPR.sub(r"\1", lines[-1]) if lines else ""
    return f"{type(error).__name__}: {last}".rstrip(": ")


def trace_job(module: str, op: str, key: dict, specialisation: dict, arch: str) -> dict:
    """Lower one (variant, arch) for HIP: {"signature", "source", "kernels"} or {"error"}.

    Failures are data here (they fill the manifest), so any exception becomes an "error".
    """
    from build_tools.smem_slots import canonical_source
    from build_tools.trace import kernels_of, signature_of

    spec = next(s for s in load_specs(module) if s.op == op)
    point = VariantPoint(spec, key, specialisation, (arch,))
    try:
        func = spec.factory(arch=arch, **key, **specialisation)
        func = func.with_attr("global_symbol", point.name)
        sig = signature_of(func)
        artifact = lower_hip(func, arch)
        lowered = {
            "signature": sig.text(),
            "source": canonical_source(artifact),  # slots independent of heap addresses
            "kernels": kernels_of(artifact, sig),
        }
    except Exception as e:  # noqa: BLE001 - recorded per variant, see the docstring
        return {"error": _one_line(e)}
    # Through JSON: TVM's string and int subclasses must not leak into the results.
    return json.loads(json.dumps(lowered))


def trace_all(points, archs, module: str, jobs: int) -> dict:
    """{(variant name, arch): trace_job's result}; a worker that dies is an error too."""
    by_key = {f"{p.name}@{a}": (p, a) for p in points for a in archs}
    queue = [
        work_queue.Job(k, [module, p.spec.op, dict(p.key), dict(p.specialisation), a])
        for k, (p, a) in by_key.items()
    ]
    results = {}
    progress = Progress("lowering for HIP", len(queue))

    def done(outcome: work_queue.Outcome) -> None:
        progress.advance(1.0, outcome.key)
        point, arch = by_key[outcome.key]
        if outcome.ok:
            results[(point.name, arch)] = outcome.result
        else:  # only a crash gets here (trace_job catches exceptions): keep its last line
            last = outcome.error.strip().splitlines()[-1:] or ["unknown"]
            results[(point.name, arch)] = {"error": f"worker failed: {last[0]}"}

    try:
        work_queue.run(queue, "build_tools.hip:trace_job", max(1, min(jobs, len(queue))), done)
    finally:
        progress.close()
    return results


# ---------------------------------------------------------------------------------------------
# Emission
# ---------------------------------------------------------------------------------------------


def _spec_text(point: VariantPoint) -> str:
    return "_".join(f"{k.lower()}{v}" for k, v in point.specialisation.items()) or "any"


def _row(point: VariantPoint, arch: str, result: dict, sources: dict) -> dict:
    row = {
        "name": point.name,
        "op": point.spec.op,
        "key": point.key_string,
        "spec": _spec_text(point),
        "arch": arch,
    }
    if "error" in result:
        return row | {"error": result["error"]}
    digest = hashlib.sha256(result["source"].encode()).hexdigest()[:12]
    source = sources.setdefault(digest, (f"src/{point.name}.{digest}.hip", result["source"]))[0]
    return row | {
        "source": source,
        "code_object": f"co/{Path(source).stem}.{arch}.hsaco",
        "signature": result["signature"],
        "constraints": point.spec.constraints(point.key, point.specialisation),
        "kernels": result["kernels"],
    }


def write_hip(out: Path, points, archs, ops, results: dict, tilelang_version: str) -> dict:
    """Write OUT/src/*.hip, OUT/manifest.json and OUT/workspace.cpp from lowering results;
    returns the manifest."""
    sources: dict[str, tuple[str, str]] = {}  # digest → (path, text); first variant names it
    rows = [_row(p, a, results[(p.name, a)], sources) for p in points for a in archs]
    rows.sort(key=lambda r: (r["op"], r["key"], r["name"], r["arch"]))
    for path, text in sources.values():
        write_if_different(out / path, text)
    for stale in (out / "src").glob("*.hip"):
        if f"src/{stale.name}" not in {path for path, _ in sources.values()}:
            stale.unlink()
    failed = [r for r in rows if "error" in r]
    manifest = {
        "format": MANIFEST_FORMAT,
        "tilelang": tilelang_version,
        "archs": list(archs),
        "ops": list(ops),
        "summary": {"rows": len(rows), "lowered": len(rows) - len(failed), "failed": len(failed)},
        "variants": rows,
    }
    write_if_different(out / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    lowered = {r["op"] for r in rows if "error" not in r}
    write_if_different(out / "workspace.cpp", emit_workspace_cpp(schemas_of(points, lowered)))
    return manifest


# ---------------------------------------------------------------------------------------------
# Compiling with hipcc
# ---------------------------------------------------------------------------------------------


def tilelang_hip_include_dir() -> str | None:
    """tilelang's `src` (tl_templates/hip), found without importing tilelang."""
    spec = importlib.util.find_spec("tilelang")
    for root in (spec.submodule_search_locations or []) if spec else []:
        src = Path(root) / "src"
        if (src / "tl_templates" / "hip" / "common.h").is_file():
            return str(src)
    return None


def find_hipcc() -> str | None:
    """$ROCM_PATH/bin/hipcc if ROCM_PATH is set, else `hipcc` on PATH."""
    rocm = os.environ.get("ROCM_PATH")
    if rocm and os.access(Path(rocm) / "bin" / "hipcc", os.X_OK):
        return str(Path(rocm) / "bin" / "hipcc")
    return shutil.which("hipcc")


def hipcc_command(hipcc: str, source: str, arch: str, output: str, include_dirs) -> list[str]:
    """One device source to one code object (HSACO) for one gfx arch, as TileLang's own HIP
    build does (tilelang/contrib/hipcc.py): --genco emits the device code object only."""
    flags = ["--genco", f"--offload-arch={arch}", "-O3", "-std=c++17"]
    return [hipcc, *flags, *(f"-I{d}" for d in include_dirs), "-o", output, source]


def code_object_jobs(manifest: dict) -> list[tuple[str, str, str]]:
    """Distinct (source, arch, code object) of the lowered rows, sorted."""
    return sorted(
        {(r["source"], r["arch"], r["code_object"]) for r in manifest["variants"] if "source" in r}
    )


def compile_code_objects(out: Path, manifest: dict, hipcc: str, jobs: int) -> list[str]:
    """Compile every code object the manifest names; returns the failures' messages."""
    include = tilelang_hip_include_dir()
    if include is None:
        return ["tilelang's tl_templates/hip headers not found: pip install tilelang==0.1.15"]
    commands = []
    for source, arch, co in code_object_jobs(manifest):
        (out / co).parent.mkdir(parents=True, exist_ok=True)
        commands.append(hipcc_command(hipcc, source, arch, co, [include]))

    def run(cmd: list[str]) -> str | None:
        proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
        return None if proc.returncode == 0 else f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}"

    # Threads suffice: each job is a hipcc process.
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return [f for f in pool.map(run, commands) if f is not None]


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m build_tools hip", description=__doc__)
    parser.add_argument("--out", required=True, help="output folder (e.g. build/hip)")
    parser.add_argument("--archs", default=",".join(HIP_ARCHS), help="e.g. gfx90a,gfx942")
    parser.add_argument("--ops", default="*", help="globs over variant names, e.g. 'rms_norm*'")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--specs", default="kernels_py", help="module whose all_specs() to build")
    parser.add_argument(
        "--compile",
        choices=("auto", "always", "never"),
        default="auto",
        help="compile code objects with hipcc: when found (auto), or fail without it (always)",
    )
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        archs, ops = parse_hip_archs(args.archs), parse_ops(args.ops)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    os.environ.setdefault("TILELANG_CACHE_DIR", str(out.resolve() / ".tlcache"))
    points = hip_points(args.specs, ops)
    if not points:
        print(f"error: no variants match ops={','.join(ops)}", file=sys.stderr)
        return 2
    results = trace_all(points, archs, args.specs, args.jobs)
    manifest = write_hip(out, points, archs, ops, results, version("tilelang"))
    s = manifest["summary"]
    print(
        f"tileaot hip: {s['lowered']} of {s['rows']} (variant, arch) rows lowered, "
        f"{s['failed']} failed (see 'error' in {out / 'manifest.json'})",
        file=sys.stderr,
    )
    return _compile_step(out, manifest, args.compile, args.jobs)


def _compile_step(out: Path, manifest: dict, mode: str, jobs: int) -> int:
    n = len(code_object_jobs(manifest))
    hipcc = find_hipcc() if mode != "never" else None
    if hipcc is None:
        if mode == "always":
            print("error: hipcc not found: install ROCm or set ROCM_PATH", file=sys.stderr)
            return 1
        why = "--compile never" if mode == "never" else "hipcc not found (set ROCM_PATH)"
        print(f"tileaot hip: {why}: {n} code objects not compiled", file=sys.stderr)
        return 0
    failures = compile_code_objects(out, manifest, hipcc, jobs)
    for failure in failures:
        print(f"tileaot hip: hipcc failed:\n{failure}", file=sys.stderr)
    print(
        f"tileaot hip: compiled {n - len(failures)} of {n} code objects with {hipcc}",
        file=sys.stderr,
    )
    return 1 if failures else 0
