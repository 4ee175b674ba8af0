"""Compile TileLang-generated device-only CUDA sources to cubins (one source, one arch each).

Default compiler: NVRTC from PyPI (`nvidia-cuda-nvrtc-cu12`, loaded with ctypes), with the CUDA
headers of `nvidia-cuda-runtime-cu12` / `nvidia-cuda-cccl-cu12`: no system CUDA toolkit needed,
and NVRTC 12.9 still targets sm_70. Options follow TileLang's own NVRTC path
(tilelang/contrib/nvrtc.py + tilelang/jit/adapter/nvrtc/libgen.py), so the device code is the
code TileLang's JIT would run. `--compiler nvcc` uses a system nvcc with the same headers.

This module must stay cheap to import: it never imports tilelang or torch (their headers are
found with importlib.util.find_spec, which does not run the package's __init__).

Environment:
  TILEAOT_INCLUDE_DIRS  extra header dirs (os.pathsep-separated), searched before tilelang's
                        (use them where tilelang is not installed: tl_templates + cutlass/include)
  TILEAOT_NVRTC         path of a libnvrtc.so to use instead of the PyPI / CUDA_HOME one
  TILEAOT_NVCC          path of nvcc (default: $CUDA_HOME/bin/nvcc, /usr/local/cuda/bin/nvcc, PATH)
  CUDA_HOME / CUDA_PATH system toolkit, for nvcc or a system libnvrtc
  TILEAOT_CACHE_DIR     the build cache (cache.py; default ~/.cache/tileaot): a cubin is reused
                        when its source, arch, flags and compiler build are unchanged
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

try:  # run as `python -m build_tools ...` or imported as build_tools.compile
    from .cache import Cache, digest, write_atomic
    from .cubin import cubin_arch
except ImportError:  # run as a plain script
    from cache import Cache, digest, write_atomic  # type: ignore[no-redef]
    from cubin import cubin_arch  # type: ignore[no-redef]

COMPILERS = ("nvrtc", "nvcc")

# Prepended to every source, as TileLang's NVRTC path does: NVRTC has no libc/libstdc++
# headers, nvrtc_std.h supplies the fixed-width ints, CUtensorMap, etc.
NVRTC_PRELUDE = "#include <tl_templates/cuda/nvrtc_std.h>\n"
# TileLang spells griddepcontrol (programmatic dependent launch, sm_90+) with the CUDA runtime's
# device functions. Their header, cuda_device_runtime_api.h, needs crt/host_defines.h, which
# the PyPI runtime package does not ship: define the two as the PTX they stand for instead.
PDL_PRELUDE = (
    "static __device__ __forceinline__ void cudaGridDependencySynchronize() {\n"
    '  asm volatile("griddepcontrol.wait;" ::: "memory");\n'
    "}\n"
    "static __device__ __forceinline__ void cudaTriggerProgrammaticLaunchCompletion() {\n"
    '  asm volatile("griddepcontrol.launch_dependents;" :::);\n'
    "}\n"
)
PDL_CALLS = ("cudaGridDependencySynchronize", "cudaTriggerProgrammaticLaunchCompletion")


class CompileError(RuntimeError):
    pass


def normalize_arch(arch: str) -> str:
    """'90a', 'sm_90a', 'SM90A' -> 'sm_90a'; 'compute_80' (PTX, no suffix) stays as it is."""
    text = arch.strip().lower()
    m = re.fullmatch(r"compute_?(\d{2,3})", text)
    if m:
        return f"compute_{m.group(1)}"
    m = re.fullmatch(r"(?:sm_?)?(\d{2,3})([af]?)", text)
    if not m:
        raise ValueError(f"bad CUDA arch {arch!r}: expected e.g. sm_80, 90a, sm_100f, compute_80")
    return f"sm_{m.group(1)}{m.group(2)}"


def is_ptx(arch: str) -> bool:
    """A compute_XX arch: the compiler emits PTX (text), which the driver JIT-compiles."""
    return arch.startswith("compute_")


def check_ptx(data: bytes, arch: str) -> None:
    """PTX of `arch` (compute_80) names `.target sm_80` and is NUL-terminated (what
    cuModuleLoadData needs); CompileError otherwise."""
    want = f".target sm_{arch.removeprefix('compute_')}"
    text = data.rstrip(b"\0").decode(errors="replace")
    target = re.search(r"^\s*\.target\s+(\S+)", text, re.MULTILINE)
    if not data.endswith(b"\0") or target is None or f".target {target.group(1)}" != want:
        got = target.group(0).strip() if target else "no .target"
        raise CompileError(f"expected PTX with {want!r} (NUL-terminated), got {got!r}")


# ---------------------------------------------------------------------------------------------
# Locating headers and compilers
# ---------------------------------------------------------------------------------------------


def _package_dirs(name: str) -> list[Path]:
    """Directories of an installed (namespace) package, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


@functools.cache
def tilelang_include_dirs() -> tuple[str, ...]:
    """tilelang's `src` (tl_templates) and CUTLASS include dirs, or () if tilelang is absent."""
    for root in _package_dirs("tilelang"):
        src, cutlass = root / "src", root / "3rdparty" / "cutlass" / "include"
        if (src / "tl_templates" / "cuda" / "nvrtc_std.h").is_file():
            return (str(src), str(cutlass)) if cutlass.is_dir() else (str(src),)
    return ()


def env_include_dirs() -> list[str]:
    return [d for d in os.environ.get("TILEAOT_INCLUDE_DIRS", "").split(os.pathsep) if d]


def kernel_include_dirs(extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Header dirs for tl_templates + cute: explicit ones first, then tilelang's."""
    dirs = [str(Path(d).resolve()) for d in (*extra, *env_include_dirs())]
    dirs += [d for d in tilelang_include_dirs() if d not in dirs]
    if not any(Path(d, "tl_templates", "cuda", "nvrtc_std.h").is_file() for d in dirs):
        raise CompileError(
            "TileLang headers (tl_templates/cuda/*.h) not found: install tilelang==0.1.15, or "
            "pass --include-dir DIR (repeatable) / set TILEAOT_INCLUDE_DIRS to tilelang's `src` "
            "and `3rdparty/cutlass/include` directories"
        )
    return dirs


def _cuda_home() -> Path | None:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return Path(os.environ[var])
    if Path("/usr/local/cuda/include/cuda.h").is_file():
        return Path("/usr/local/cuda")
    nvcc = shutil.which("nvcc")  # may be a wrapper script: trust it only next to include/
    if nvcc and Path(nvcc).resolve().parent.parent.joinpath("include", "cuda.h").is_file():
        return Path(nvcc).resolve().parent.parent
    return None


def _toolkit_include_dirs(cuda_home: Path) -> list[str]:
    """A system toolkit's headers: flat and targets/<arch>-linux layouts, each with cccl/."""
    machine = "sbsa-linux" if os.uname().machine in ("aarch64", "arm64") else "x86_64-linux"
    dirs = []
    for inc in (cuda_home / "include", cuda_home / "targets" / machine / "include"):
        if inc.is_dir():
            dirs.append(str(inc))
            if (inc / "cccl").is_dir():
                dirs.append(str(inc / "cccl"))
    return dirs


def _pypi_cuda_include_dirs() -> list[str]:
    """cuda_runtime.h etc. (nvidia-cuda-runtime-cu12) and cuda/std (nvidia-cuda-cccl-cu12)."""
    dirs = []
    for root in _package_dirs("nvidia"):
        for sub in (
            "cuda_runtime/include",
            "cuda_cccl/include",
            "cu13/include",
            "cu13/include/cccl",
        ):
            if (root / sub).is_dir():
                dirs.append(str(root / sub))
    return dirs


def _legacy_cuda_std_dirs(cuda_dirs: list[str], major: int) -> list[str]:
    # As libgen.py: CUDA < 13 keeps cuda::std at the legacy <include>/cuda/std path and TileLang
    # adds it to the search path; CUDA 13 moved it under cccl/, already reachable.
    if major >= 13:
        return []
    cccl = os.path.join("include", "cccl")
    return [
        str(Path(d) / "cuda" / "std")
        for d in cuda_dirs
        if not d.endswith(cccl) and (Path(d) / "cuda" / "std").is_dir()
    ]


@dataclass(frozen=True)
class Toolchain:
    kind: str  # "nvrtc" or "nvcc"
    path: str  # libnvrtc.so or nvcc
    version: tuple[int, int]
    cuda_include_dirs: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.kind} {self.version[0]}.{self.version[1]} ({self.path})"


def _nvrtc_candidates() -> list[tuple[str, list[str]]]:
    """(libnvrtc path, CUDA header dirs that belong with it), in order of preference."""
    out = []
    if os.environ.get("TILEAOT_NVRTC"):
        lib = Path(os.environ["TILEAOT_NVRTC"])
        home = _cuda_home()
        cuda = (
            _pypi_cuda_include_dirs()
            if "site-packages" in str(lib)
            else (_toolkit_include_dirs(home) if home else [])
        )
        out.append((str(lib), cuda))
    for root in _package_dirs("nvidia"):
        for pattern in ("cuda_nvrtc/lib/libnvrtc.so.*", "cu13/lib/libnvrtc.so.*"):
            libs = sorted(
                p for p in glob.glob(str(root / pattern)) if re.search(r"libnvrtc\.so\.\d+$", p)
            )
            out += [(p, _pypi_cuda_include_dirs()) for p in libs]
    home = _cuda_home()
    if home:
        for libdir in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            libs = sorted(
                p
                for p in glob.glob(str(home / libdir / "libnvrtc.so*"))
                if re.search(r"libnvrtc\.so(\.\d+)?$", p)
            )
            out += [(p, _toolkit_include_dirs(home)) for p in libs[-1:]]
    return out


@functools.cache
def _load_nvrtc(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
    vp = ctypes.c_void_p
    lib.nvrtcCreateProgram.argtypes = [
        ctypes.POINTER(vp),
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_int,
        vp,
        vp,
    ]
    lib.nvrtcCompileProgram.argtypes = [vp, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.nvrtcGetProgramLogSize.argtypes = [vp, ctypes.POINTER(ctypes.c_size_t)]
    lib.nvrtcGetProgramLog.argtypes = [vp, ctypes.c_char_p]
    lib.nvrtcGetCUBINSize.argtypes = [vp, ctypes.POINTER(ctypes.c_size_t)]
    lib.nvrtcGetCUBIN.argtypes = [vp, ctypes.c_char_p]
    lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(vp)]
    return lib


@functools.cache
def find_nvrtc() -> Toolchain:
    tried = []
    for path, cuda_dirs in _nvrtc_candidates():
        try:
            lib = _load_nvrtc(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        major, minor = ctypes.c_int(), ctypes.c_int()
        if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != 0:
            tried.append(f"{path}: nvrtcVersion failed")
            continue
        if not any(Path(d, "cuda_fp16.h").is_file() for d in cuda_dirs):
            tried.append(f"{path}: no CUDA headers (cuda_fp16.h) found to go with it")
            continue
        return Toolchain("nvrtc", path, (major.value, minor.value), tuple(cuda_dirs))
    raise CompileError(
        "NVRTC not found: `pip install nvidia-cuda-nvrtc-cu12==12.9.* nvidia-cuda-runtime-cu12"
        "==12.9.* nvidia-cuda-cccl-cu12==12.9.*`, or set TILEAOT_NVRTC / CUDA_HOME"
        + "".join(f"\n  tried {t}" for t in tried)
    )


@functools.cache
def find_nvcc() -> Toolchain:
    candidates = [os.environ.get("TILEAOT_NVCC")]
    home = _cuda_home()
    if home:
        candidates.append(str(home / "bin" / "nvcc"))
    candidates.append(shutil.which("nvcc"))
    for nvcc in filter(None, candidates):
        if not os.access(nvcc, os.X_OK):
            continue
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"release (\d+)\.(\d+)", out)
        if not m:
            continue
        # nvcc adds its own toolkit's headers (include/, include/cccl): pass none.
        return Toolchain("nvcc", nvcc, (int(m.group(1)), int(m.group(2))), ())
    raise CompileError("nvcc not found: set TILEAOT_NVCC or CUDA_HOME, or use --compiler nvrtc")


def find_toolchain(compiler: str) -> Toolchain:
    if compiler == "nvrtc":
        return find_nvrtc()
    if compiler == "nvcc":
        return find_nvcc()
    raise ValueError(f"unknown compiler {compiler!r}: expected one of {COMPILERS}")


# ---------------------------------------------------------------------------------------------
# Compiling
# ---------------------------------------------------------------------------------------------


def _include_options(tc: Toolchain, include_dirs: list[str]) -> list[str]:
    cuda = list(tc.cuda_include_dirs)
    dirs = [*include_dirs, *cuda]
    if tc.kind == "nvrtc":
        dirs += _legacy_cuda_std_dirs(cuda, tc.version[0])
    return [f"-I{d}" for d in dict.fromkeys(dirs)]


def nvrtc_options(tc: Toolchain, arch: str, include_dirs: list[str]) -> list[str]:
    return [
        "-default-device",  # TileLang's sources mark only kernels; helpers are device code
        f"--gpu-architecture={arch}",  # sm_XX: SASS (a cubin); compute_XX: PTX
        "-std=c++17",
        *_include_options(tc, include_dirs),
        f"-D__CUDACC_VER_MAJOR__={tc.version[0]}",  # tl_templates branch on it
    ]


def nvcc_command(
    tc: Toolchain, src: str, arch: str, out: str, include_dirs: list[str]
) -> list[str]:
    num = arch.split("_")[1]
    return [
        tc.path,
        "--ptx" if is_ptx(arch) else "--cubin",
        "-O3",
        "-std=c++17",
        # explicit gencode: `-arch=sm_90a` alone may route through compute_90 (libgen.py note)
        f"-gencode=arch=compute_{num},code={arch}",
        "-w",
        "-Xcudafe",
        "--diag_suppress=177",
        *_include_options(tc, include_dirs),
        "-o",
        out,
        src,
    ]


def prepare_source(code: str, kind: str = "nvrtc", name: str = "") -> str:
    """NVRTC sees no implicit headers: add the ones TileLang's NVRTC path adds (nvcc needs none).
    `#line` keeps diagnostics on the source's own lines (the basename keeps cubins independent
    of where the build folder is)."""
    if kind != "nvrtc":
        return code
    prelude = NVRTC_PRELUDE
    if any(c in code for c in PDL_CALLS):
        prelude += PDL_PRELUDE
    line = f'#line 1 "{name}"\n' if name else ""
    return prelude + line + code


def _nvrtc_compile(tc: Toolchain, code: str, name: str, options: list[str]) -> bytes:
    """The cubin, or the PTX (NUL-terminated) when `options` target a compute_XX arch."""
    ptx = any(o.startswith("--gpu-architecture=compute_") for o in options)
    lib = _load_nvrtc(tc.path)
    prog = ctypes.c_void_p()

    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise CompileError(f"{what}: {lib.nvrtcGetErrorString(rc).decode()}")

    check(
        lib.nvrtcCreateProgram(ctypes.byref(prog), code.encode(), name.encode(), 0, None, None),
        "nvrtcCreateProgram",
    )
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        rc = lib.nvrtcCompileProgram(prog, len(options), opts)  # ctypes drops the GIL here
        if rc != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            raise CompileError(
                f"{lib.nvrtcGetErrorString(rc).decode()}\n{log.value.decode(errors='replace')}"
            )
        size = ctypes.c_size_t()
        what = "PTX" if ptx else "CUBIN"
        check(getattr(lib, f"nvrtcGet{what}Size")(prog, ctypes.byref(size)), f"nvrtcGet{what}Size")
        buf = ctypes.create_string_buffer(size.value)
        check(getattr(lib, f"nvrtcGet{what}")(prog, buf), f"nvrtcGet{what}")
        return buf.raw  # PTX: its size counts the terminating NUL, kept for cuModuleLoadData
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _nvcc_compile(tc: Toolchain, code: str, name: str, arch: str, include_dirs: list[str]) -> bytes:
    with tempfile.TemporaryDirectory(prefix="tileaot-nvcc-") as tmp:
        src, out = os.path.join(tmp, name), os.path.join(tmp, "out.bin")
        Path(src).write_text(code)
        cmd = nvcc_command(tc, src, arch, out, include_dirs)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
        return Path(out).read_bytes()


def write_if_different(path: Path, data: bytes) -> bool:
    """Write atomically unless `path` already holds `data`; True if written."""
    if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
        return False
    write_atomic(path, data)
    return True


@functools.cache
def compiler_identity(tc: Toolchain) -> str:
    """What a cubin depends on besides source, arch and flags: the exact compiler build and
    the header versions (tilelang's tl_templates + CUTLASS). NVRTC reports only major.minor,
    so its library's size tells builds apart; nvcc's --version names its build."""
    if tc.kind == "nvrtc":
        build = f"{Path(tc.path).name} {Path(tc.path).stat().st_size} bytes"
    else:
        build = subprocess.run([tc.path, "--version"], capture_output=True, text=True).stdout
    # Headers from TILEAOT_INCLUDE_DIRS instead of tilelang: their paths are in the flags.
    headers = f"tilelang {_installed_version('tilelang') or 'absent'}"
    return f"{tc.kind} {tc.version} {build} {headers}"


def _installed_version(name: str) -> str | None:
    """A package's version from its dist-info folder's name: importlib.metadata would add
    0.1 s to every compile process."""
    for root in _package_dirs(name):
        for info in sorted(root.parent.glob(f"{name}-*.dist-info")):
            return info.name[len(name) + 1 : -len(".dist-info")]
    return None


def _compile_flags(tc: Toolchain, name: str, arch: str, dirs: list[str]) -> list[str]:
    if tc.kind == "nvrtc":
        return nvrtc_options(tc, arch, dirs)
    return nvcc_command(tc, name, arch, "OUT", dirs)[1:]


def write_compile_stats(out: Path, seconds: float, cached: bool, tc: Toolchain, cubin: bytes):
    """<cubin>.json beside the cubin: what the build report shows for it. `zipped` (its
    deflate size, about what it adds to the wheel) is measured here, once per cubin."""
    stats = {
        "seconds": round(seconds, 3),
        "cached": cached,
        "compiler": tc.describe(),
        "bytes": len(cubin),
        "zipped": len(zlib.compress(cubin, 6)),
    }
    write_if_different(out.with_name(out.name + ".json"), json.dumps(stats).encode())


def compile_source(
    src: Path,
    arch: str,
    out: Path,
    compiler: str = "nvrtc",
    include_dirs: list[str] | tuple[str, ...] = (),
    cache: Cache | None = None,
) -> bool:
    """Compile device-only source `src` for `arch` into cubin `out` (written if different),
    through the build cache (tileaot.cache: $TILEAOT_CACHE_DIR ...). True on a cache hit."""
    src, out, arch = Path(src), Path(out), normalize_arch(arch)
    t0 = time.monotonic()
    tc = find_toolchain(compiler)
    dirs = kernel_include_dirs(include_dirs)
    code = prepare_source(src.read_text(), tc.kind, src.name)
    # Only the basename reaches the compiler: the cubin depends on content, name, arch, flags.
    flags = _compile_flags(tc, src.name, arch, dirs)
    key = digest(code, src.name, arch, compiler_identity(tc), *flags)
    cache = cache if cache is not None else Cache()
    ext = ".ptx" if is_ptx(arch) else ".cubin"
    cubin = cache.get_bytes("cubin", key, ext)
    cached = cubin is not None
    try:
        if cubin is None and tc.kind == "nvrtc":
            cubin = _nvrtc_compile(tc, code, src.name, flags)
        elif cubin is None:
            cubin = _nvcc_compile(tc, code, src.name, arch, dirs)
            cubin += b"\0" if is_ptx(arch) else b""
    except CompileError as e:
        raise CompileError(
            f"compiling {src} for {arch} with {tc.describe()} failed:\n{e}"
        ) from None
    if is_ptx(arch):
        try:
            check_ptx(cubin, arch)
        except CompileError as e:
            raise CompileError(f"compiling {src} for {arch} with {tc.describe()}: {e}") from None
    elif (got := cubin_arch(cubin)) != arch.rstrip("f"):  # "f" targets are not marked in the ELF
        raise CompileError(
            f"compiling {src} for {arch} with {tc.describe()} produced a cubin "
            f"for {got} (ELF e_flags); refusing to ship it"
        )
    if not cached:
        cache.put_bytes("cubin", key, ext, cubin)
    write_if_different(out, cubin)
    write_compile_stats(out, time.monotonic() - t0, cached, tc, cubin)
    return cached


# ---------------------------------------------------------------------------------------------
# cubins.cmake and compile-all
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CubinEntry:
    src: str  # relative to the gen dir
    arch: str
    cubin: str  # relative to the gen dir
    symbol: str


def read_cubins_cmake(gen: Path) -> list[CubinEntry]:
    """Entries of GEN/cubins.cmake: `set(TILEAOT_CUBINS "src|arch|cubin|symbol" ...)`."""
    text = (Path(gen) / "cubins.cmake").read_text()
    text = re.sub(r"#[^\n]*", "", text)
    return [
        CubinEntry(*m.groups())
        for m in re.finditer(r'"([^"|]+)\|([^"|]+)\|([^"|]+)\|([^"|]+)"', text)
    ]


def compile_all(
    gen: Path,
    jobs: int,
    compiler: str = "nvrtc",
    include_dirs: list[str] | tuple[str, ...] = (),
    verbose: bool = True,
) -> None:
    """Compile every entry of GEN/cubins.cmake (threads: NVRTC releases the GIL)."""
    gen = Path(gen)
    entries = read_cubins_cmake(gen)
    find_toolchain(compiler), kernel_include_dirs(include_dirs)  # fail once, early
    failures = []
    t0 = time.monotonic()

    def one(e: CubinEntry) -> str:
        t = time.monotonic()
        src, out = gen / e.src, gen / e.cubin
        # Names carry the source's content hash: an existing, newer cubin is this source's.
        if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
            return "up to date"
        cached = compile_source(src, e.arch, out, compiler, include_dirs)
        return "from cache" if cached else f"{time.monotonic() - t:.1f} s"

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(one, e): e for e in entries}
        for i, fut in enumerate(as_completed(futures), 1):
            e = futures[fut]
            try:
                how = fut.result()
                if verbose:
                    print(f"[{i}/{len(entries)}] {e.cubin} ({how})", flush=True)
            except Exception as exc:  # keep going; report all at the end
                failures.append(f"{e.src} [{e.arch}]: {exc}")
                print(f"[{i}/{len(entries)}] FAILED {e.cubin}", file=sys.stderr, flush=True)
    if failures:
        raise CompileError(
            f"{len(failures)} of {len(entries)} compiles failed:\n\n" + "\n\n".join(failures)
        )
    if verbose:
        print(f"compiled {len(entries)} cubins in {time.monotonic() - t0:.1f} s", flush=True)


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compiler", choices=COMPILERS, default="nvrtc")
    p.add_argument(
        "--include-dir",
        "-I",
        action="append",
        default=[],
        metavar="DIR",
        help="extra header dir (tl_templates, cutlass), before tilelang's",
    )


def _note(line: str) -> None:
    """A line for `build_tools watch` (build_tools/progress.py), when run inside the package."""
    try:
        from .progress import note
    except ImportError:  # run as a plain script
        try:
            from progress import note  # type: ignore[no-redef]
        except ImportError:
            return
    note(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m build_tools")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compile", help="compile one device source to a cubin")
    p.add_argument("src", type=Path)
    p.add_argument("--arch", required=True, help="sm_70 ... sm_100a")
    p.add_argument("-o", "--out", type=Path, required=True)
    _add_common(p)
    p = sub.add_parser("compile-all", help="compile every entry of GEN/cubins.cmake")
    p.add_argument("gen", type=Path)
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    _add_common(p)
    args = parser.parse_args(argv)
    try:
        if args.command == "compile":
            compile_source(args.src, args.arch, args.out, args.compiler, args.include_dir)
            _note(f"compiled {args.out.name}")
        else:
            compile_all(args.gen, args.jobs, args.compiler, args.include_dir)
    except (CompileError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
