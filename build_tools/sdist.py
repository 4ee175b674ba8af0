"""`python -m build_tools sdist`: a source distribution that builds without tilelang or torch.

Tracing needs tilelang + torch; compiling needs only NVRTC (or nvcc). So the sdist is made where
tilelang is installed and carries the generate stage's output in `gen/`:

    gen/src/*.cu, manifest.json, registry.cpp, cubins.cmake   what `generate` wrote
    gen/include/                 the tl_templates + CUTLASS/cute headers those sources include
    gen/bundle.cmake             the archs/ops it was generated for (cmake/TileaotUserBuild.cmake)
    gen/config.toml              the bring-your-shapes file, if one was used
    gen/cubin/*.cubin            only with --with-cubins (then no CUDA compiler is needed at all)

CMake finds gen/bundle.cmake and builds from it: its archs and ops become the defaults, and a
build asking for others stops with a message. The archive itself is written by the project's
build backend (scikit-build-core) from a staged copy of the checkout plus gen/, so it holds
the same files and metadata as a plain sdist.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from build_tools.headers import copy_headers, include_closure
from kernels_py.spec import DEFAULT_ARCHS

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = "gen"  # the folder's name inside the sdist; CMakeLists.txt looks for gen/bundle.cmake


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    work = Path(args.work).resolve()
    gen = Path(args.gen).resolve() if args.gen else work / "gen"
    try:
        if not args.gen:
            _generate(gen, args)
        if args.with_cubins:
            _run([sys.executable, "-m", "build_tools", "compile-all", str(gen)])
        stage = stage_tree(work / "stage", gen, args.config, args.with_cubins)
        sdist = build_sdist(stage, Path(args.out).resolve())
    except (OSError, ValueError, RuntimeError, subprocess.CalledProcessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"tileaot sdist: {sdist}")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m build_tools sdist",
        description="Make a source distribution that carries its generated sources "
        "(building it needs CMake, a C++ compiler and NVRTC or nvcc; not tilelang or torch).",
    )
    p.add_argument("--archs", default=",".join(DEFAULT_ARCHS), help="e.g. 90a,100a")
    p.add_argument("--ops", default="*", help="globs over variant names, e.g. 'rms_norm*'")
    p.add_argument("--config", help="bring-your-shapes TOML (its archs replace --archs)")
    p.add_argument("--gen", help="bundle this existing gen folder instead of generating")
    p.add_argument("--with-cubins", action="store_true", help="also compile and ship the cubins")
    p.add_argument("-o", "--out", default="dist", help="where the .tar.gz goes (default dist/)")
    p.add_argument("--work", default=str(ROOT / "build" / "sdist"), help="scratch folder")
    return p


def _generate(gen: Path, args) -> None:
    cmd = [sys.executable, "-m", "build_tools", "generate", "--out", str(gen)]
    cmd += ["--archs", args.archs, "--ops", args.ops]
    if args.config:
        from build_tools.userconfig import load

        config = load(args.config)  # its ops name the build, as CMake does with TILEAOT_CONFIG
        cmd += ["--config", str(Path(args.config).resolve())]
        if args.ops == "*":
            cmd[cmd.index("--ops") + 1] = ",".join(config.ops)
    _run(cmd)


def _run(cmd: list[str]) -> None:
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


# ---- the staged tree ---------------------------------------------------------------------------


def stage_tree(stage: Path, gen: Path, config: str | None = None, cubins: bool = False) -> Path:
    """A copy of the checkout's files plus gen/ (sources, headers, bundle.cmake)."""
    manifest = json.loads((gen / "manifest.json").read_text())
    if stage.exists():
        shutil.rmtree(stage)
    for rel in checkout_files(ROOT):
        if rel.split("/")[0] == BUNDLE:
            raise ValueError(
                f"the checkout has a {BUNDLE}/ folder ({rel}); the sdist needs the name"
            )
        dest = stage / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(ROOT / rel, dest)
        except FileNotFoundError:  # an editor's temporary file, gone since git listed it
            continue
    bundle = stage / BUNDLE
    copy_gen(gen, bundle, manifest, cubins)
    bundle_headers(bundle)
    if config:
        shutil.copyfile(config, bundle / "config.toml")
    write_bundle_cmake(bundle, manifest, Path(config).name if config else "", cubins)
    return stage


def checkout_files(root: Path) -> list[str]:
    """What a plain sdist starts from: tracked files and untracked ones git does not ignore."""
    if not (root / ".git").exists():
        raise ValueError(f"{root} is not a git checkout: make the sdist from one")
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return sorted({f for f in out.split("\0") if f and (root / f).is_file()})


def copy_gen(gen: Path, dest: Path, manifest: dict, cubins: bool) -> None:
    """The generate stage's files (not its caches); with `cubins`, the manifest's cubins."""
    dest.mkdir(parents=True)
    for path in gen.iterdir():
        if path.is_file() and not path.name.startswith("."):
            shutil.copy2(path, dest / path.name)
    shutil.copytree(gen / "src", dest / "src")
    for entry in manifest["cubins"] if cubins else ():
        src = gen / entry["cubin"]
        if not src.is_file():
            raise ValueError(f"{src} missing: run python -m build_tools compile-all {gen}")
        (dest / entry["cubin"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / entry["cubin"])


def bundle_headers(bundle: Path) -> None:
    """gen/include: the headers the sources reach, with the licences they come under."""
    from build_tools.compile import NVRTC_PRELUDE, kernel_include_dirs

    roots = kernel_include_dirs()  # tilelang's (or TILEAOT_INCLUDE_DIRS): clear error if none
    texts = [NVRTC_PRELUDE] + [p.read_text() for p in sorted((bundle / "src").glob("*.cu"))]
    headers = include_closure(texts, roots)
    size = copy_headers(headers, bundle / "include")
    (bundle / "include" / "NOTICE").write_text(_notice())
    licence = _tilelang_licence()
    if licence:
        shutil.copyfile(licence, bundle / "include" / "LICENSE.tilelang")
    print(f"tileaot sdist: {len(headers)} headers ({size / 1e6:.1f} MB) from {', '.join(roots)}")


def _notice() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        tilelang = f"tilelang {version('tilelang')}"
    except PackageNotFoundError:
        tilelang = "tilelang"
    return (
        f"Headers copied from {tilelang} so that this source distribution compiles without it:\n"
        "  tl_templates/    TileLang, MIT License (LICENSE.tilelang)\n"
        "  cute/, cutlass/  NVIDIA CUTLASS as vendored by TileLang, BSD-3-Clause (the licence\n"
        "                   text heads every file)\n"
        "Only the headers the generated sources include are here.\n"
    )


def _tilelang_licence() -> Path | None:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("tilelang")
    except PackageNotFoundError:
        return None
    for f in dist.files or ():
        if Path(f).name.upper().startswith("LICENSE"):
            return Path(dist.locate_file(f))
    return None


def write_bundle_cmake(bundle: Path, manifest: dict, config: str, cubins: bool) -> None:
    lines = [
        "# Written by `python -m build_tools sdist`: what gen/ was generated for.",
        "# Read by cmake/TileaotUserBuild.cmake; a build asking for other archs/ops stops.",
        f'set(TILEAOT_BUNDLE_ARCHS "{";".join(manifest["archs"])}")',
        f'set(TILEAOT_BUNDLE_OPS "{",".join(manifest["ops"])}")',
        f'set(TILEAOT_BUNDLE_CONFIG "{config}")',
        f"set(TILEAOT_BUNDLE_CUBINS {'ON' if cubins else 'OFF'})",
    ]
    (bundle / "bundle.cmake").write_text("\n".join(lines) + "\n")


# ---- the archive -------------------------------------------------------------------------------


def build_sdist(stage: Path, out: Path) -> Path:
    """The build backend's own sdist of the staged tree (PKG-INFO, its include/exclude rules)."""
    out.mkdir(parents=True, exist_ok=True)
    code = "import sys; from scikit_build_core.build import build_sdist as b; print(b(sys.argv[1]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        cwd=stage,
        check=True,
        capture_output=True,
        text=True,
    )
    name = proc.stdout.strip().splitlines()[-1]
    return out / name
