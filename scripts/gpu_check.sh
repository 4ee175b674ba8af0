#!/usr/bin/env bash
# The GPU check flow, in two halves (the GPU machine has no tilelang and no internet):
#
#   here:  bash scripts/gpu_check.sh prepare      # trace + compile sm_90a cubins into build/gpu/gen
#   there: bash scripts/gpu_check.sh run          # build the module on them, GPU tests, bench
#
# The PTX test mode runs the sm_70/75/80 sources on this one GPU through the driver's JIT:
#
#   here:  bash scripts/gpu_check.sh prepare_ptx     # trace 70;75;80;90a, PTX of 70,75,80 too
#   there: bash scripts/gpu_check.sh tests_ptx 80    # builds on first use, then the GPU tests
#                                                    # with TILEAOT_PTX=prefer:80 (70, 75 alike)
# (device tool: carry=["build/gpu/gen_ptx"]; TILEAOT_GPU_OPS narrows the ops, e.g. 'rms_norm*').
#
# `verify` = the GPU issue's whole run in one call (see its comment below).
# `run` = build + tests + cpp_example + bench. The steps are also commands of their own: build,
# tests [FILES], cpp_example (examples/cpp against the installed package), bench, suite,
# tkbench (TileKernels' kernels at the suite's shapes), cold_start,
# jit [--match RE] (TileLang JIT of the same kernels side by side), tune
# CASE_RE 'CONST=value' ... (JIT candidates of a kernel file's constants), probe CASE_RE (ncu).
# The device tool runs them with carry=["build/gpu/gen", ".carry/tlsite.tar.xz"] (the latter
# only for jit/tune: `bash scripts/gpu_check.sh tilelang_tarball` makes it); logs go to $OUT
# (or build/gpu/out). The cubins tested are the ones this machine's NVRTC 12.9 made, i.e. the
# same bytes a wheel built here ships.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/tlsite.sh
GEN=build/gpu/gen
ARCHS=${TILEAOT_GPU_ARCHS:-90a}

prepare() {
  python -m build_tools generate --out "$GEN" --archs "$ARCHS"
  python -m build_tools compile-all "$GEN"
}

# PTX test mode (see the top): the sources traced for 70, 75 and 80 embedded as PTX beside the
# sm_90a cubins (which serve what has no PTX, e.g. bf16 gemm on sm_70/75).
GEN_PTX=build/gpu/gen_ptx
PTX_ARCHS=${TILEAOT_GPU_PTX_ARCHS:-70;75;80}
PTX_BUILD_ARCHS="$PTX_ARCHS;90a"
prepare_ptx() {
  python -m build_tools generate --out "$GEN_PTX" --archs "$PTX_BUILD_ARCHS" \
    --ops "${TILEAOT_GPU_OPS:-*}" --ptx "$PTX_ARCHS"
  python -m build_tools compile-all "$GEN_PTX"
  ls "$GEN_PTX"/ptx | sed -E 's/.*\.(compute_[0-9]+)\.ptx$/\1/' | sort | uniq -c
}

build_ptx() {
  local out=${OUT:-build/gpu/out}
  mkdir -p "$out"
  python -m pip install -q --no-build-isolation --no-deps --no-cache-dir . \
    -Ccmake.define.TILEAOT_GEN_DIR="$PWD/$GEN_PTX" -Ccmake.define.TILEAOT_PREBUILT_CUBINS=ON \
    -Ccmake.define.TILEAOT_ARCHS="$PTX_BUILD_ARCHS" -Ccmake.define.TILEAOT_OPS="${TILEAOT_GPU_OPS:-*}" \
    -Cbuild-dir=build/gpu/cmake_ptx 2>&1 | tail -20
  python -m tileaot info | tee "$out/info_ptx.txt"
}

# tests_ptx ARCH [FILES]: the GPU tests with dispatch preferring the compute_ARCH PTX (JIT on
# this GPU); builds the PTX-mode package first unless the installed one has that PTX.
tests_ptx() {
  local arch=${1:?usage: gpu_check.sh tests_ptx 70|75|80 [FILES]} out=${OUT:-build/gpu/out}
  shift
  mkdir -p "$out"
  if ! python - "$arch" <<'PY'
import json, sys
from tileaot import _manifest
sys.exit(f"compute_{sys.argv[1]}" not in json.load(open(_manifest.default_path())).get("ptx", []))
PY
  then
    build_ptx
  fi
  # The switch works: rms_norm's first launch runs the compute_ARCH PTX and says so once.
  TILEAOT_PTX="prefer:$arch" python - "$arch" 2>&1 <<'PY' | tee "$out/ptx_$arch.txt"
import sys, torch, tileaot
x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
for _ in range(2):
    y = tileaot.rms_norm(x, w)
ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float())
torch.cuda.synchronize()
print("rms_norm max abs err", (y.float() - ref).abs().max().item())
PY
  [ "$(grep -c "runs PTX (compute_$arch)" "$out/ptx_$arch.txt")" -eq 1 ] ||
    { echo "tests_ptx: rms_norm did not run the compute_$arch PTX (once)" >&2; return 1; }
  mkdir -p "$out/ptx_$arch"
  TILEAOT_PTX="prefer:$arch" OUT="$out/ptx_$arch" tests "$@"
}

build() {
  local out=${OUT:-build/gpu/out}
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
  # Build the native module for this machine's Python from the carried gen folder.
  python -m pip install -q --no-build-isolation --no-deps --no-cache-dir . \
    -Ccmake.define.TILEAOT_GEN_DIR="$PWD/$GEN" -Ccmake.define.TILEAOT_PREBUILT_CUBINS=ON \
    -Ccmake.define.TILEAOT_ARCHS="$ARCHS" -Cbuild-dir=build/gpu/cmake 2>&1 | tail -20
  python -m tileaot info | tee "$out/info.txt"
  # wgmma on sm_90a: the gemm cubins must contain HGMMA instructions.
  for cubin in "$GEN"/cubin/gemm_*sm_90a.cubin; do
    [ -e "$cubin" ] || continue
    printf '%s HGMMA=%s\n' "$(basename "$cubin")" "$(cuobjdump --dump-sass "$cubin" | grep -c HGMMA || true)"
  done | tee "$out/sass.txt"
}

tests() {
  local out=${OUT:-build/gpu/out}
  # With the carried tarball, tilelang and TileKernels' references are importable, so the
  # tests comparing with tile_kernels.torch directly run instead of skipping.
  # GPU tests only (the CPU suite runs in CI), each result streamed (-v) so a hang still
  # leaves a record; a full-suite run once hung past 600 s in CPU tests on this machine.
  TILEAOT_REDUCED_BUILD=1 with_tilelang_if_carried timeout "${TEST_TIMEOUT:-300}" python -m pytest "${@:-tests}" -m gpu -v \
    -p no:cacheprovider --continue-on-collection-errors --tb=short 2>&1 | tee "$out/pytest.txt"
  return "${PIPESTATUS[0]}"
}

bench() {
  local out=${OUT:-build/gpu/out}
  timeout "${BENCH_TIMEOUT:-240}" python bench/run.py --json "$out/bench.json" "$@" 2>&1 |
    tee "$out/bench.txt"
}

# TileLang for the JIT comparison: the GPU machine has none and no internet, so a trimmed
# site-packages tarball is carried (.carry/tlsite.tar.xz, made by `tilelang_tarball` here).
with_tilelang() {
  (tlsite_env || { echo "no .carry/tlsite.tar.xz: make it here with 'bash scripts/gpu_check.sh tilelang_tarball' and carry it" >&2; exit 1; }
   "$@")
}

# with_tilelang_if_carried CMD...: CMD with the carried tarball's tilelang on the path when it
# was carried, else CMD as it is (the steps that record TileLang's rows as skipped without it).
with_tilelang_if_carried() {
  if [ -e .carry/tlsite.tar.xz ]; then with_tilelang "$@"; else "$@"; fi
}

tune() {
  with_tilelang timeout "${TUNE_TIMEOUT:-300}" python bench/tune.py "$@"
}

# The benchmark suite (bench/suite.py, issue 4) after `build`: results in $OUT/results, each
# step's log in $OUT/suite; TileLang's JIT rows need the carried tarball (else recorded skipped).
suite() {
  local out=${OUT:-build/gpu/out}
  mkdir -p "$out"
  with_tilelang_if_carried timeout "${SUITE_TIMEOUT:-590}" python bench/suite.py --out "$out/results" \
    --work "$out/suite" "$@" 2>&1 | tee "$out/suite.txt"
  return "${PIPESTATUS[0]}"
}

# TileKernels' own kernels at the suite's shapes (bench/tilekernels.py; needs the carried
# tarball, else it says so in one line and exits 0): tables in $OUT/results beside the suite's,
# whose newest JSON there (if any) gives the tileaot column.
tkbench() {
  local out=${OUT:-build/gpu/out} suite_json
  mkdir -p "$out/results"
  suite_json=$(ls -t "$out"/results/*-[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9].json 2>/dev/null | head -1 || true)
  with_tilelang_if_carried timeout "${TKBENCH_TIMEOUT:-590}" python bench/tilekernels.py --out "$out/results" \
    ${suite_json:+--suite "$suite_json"} "$@" 2>&1 | tee "$out/tkbench.txt"
  return "${PIPESTATUS[0]}"
}

# Cold start (bench/cold_start.py, issue 21 item 4) on its own: the suite's cold_start step,
# for runs that pass the suite `--skip cold_start` to fit the device time. With the carried
# tarball it also starts TileLang's JIT (empty and warm cache) for comparison.
cold_start() {
  local out=${OUT:-build/gpu/out} jit=()
  mkdir -p "$out/results"
  if [ -e .carry/tlsite.tar.xz ]; then jit=(--tilelang); fi
  with_tilelang_if_carried timeout "${COLD_TIMEOUT:-300}" python bench/cold_start.py --repeats 3 "${jit[@]}" \
    --json "$out/results/cold_start.json" "$@" 2>&1 | tee "$out/cold_start.txt"
  return "${PIPESTATUS[0]}"
}

jit() {
  local out=${OUT:-build/gpu/out}
  with_tilelang timeout "${JIT_TIMEOUT:-400}" python bench/jit_compare.py \
    --json "$out/jit.json" "$@" 2>&1 | tee "$out/jit.txt"
}

# Hardware counters of the cases matching $1 (kernel names matching $2, default: all).
probe() {
  local out=${OUT:-build/gpu/out}
  ncu --clock-control none -k "regex:${2:-.}" --launch-skip 0 \
    --section SpeedOfLight --section LaunchStats --section Occupancy \
    --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis \
    python bench/ncu_probe.py "$1" > "$out/ncu.txt" 2>&1
  grep -E "^  [a-z_0-9]+_kernel|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Block Limit Reg|Waves Per SM" \
    "$out/ncu.txt" | head -400
}

# Here (CPU machine): the trimmed tilelang site-packages for Python 3.12 that `jit` unpacks.
tilelang_tarball() {
  local dir=build/tlsite
  rm -rf "$dir" && mkdir -p "$dir"
  python -m pip install -q --no-deps --target "$dir/tlsite" --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --python-version 3.12 --implementation cp \
    --only-binary=:all: tilelang==0.1.15 'apache-tvm-ffi>=0.1.11,<0.1.13' 'z3-solver<4.15.5' \
    torch-c-dlpack-ext
  # TileKernels' pure-torch references for the GPU tests that compare with them directly
  # (tests/_tile_kernels.py imports them through tilelang, hence in the same tarball).
  python -m pip install -q --no-deps --target "$dir/tlsite" tile-kernels==1.0.0
  # Not needed to JIT CUDA kernels (tilelang/ascend is: tilelang.cache imports it); dropping
  # them keeps the tarball + gen folder under the device tool's 64 MiB carry limit.
  (cd "$dir/tlsite" && rm -rf bin/z3 tilelang/3rdparty/tvm/src tilelang/3rdparty/cutlass/tools \
    z3/include && find . -name __pycache__ -type d -prune -exec rm -rf {} + &&
    find . -name '*.so*' -type f -exec strip --strip-unneeded {} + 2>/dev/null || true)
  mkdir -p .carry && tar -C "$dir" -cf - tlsite | xz -9 -T2 > .carry/tlsite.tar.xz
  ls -la .carry/tlsite.tar.xz
}

# The C++ example (examples/cpp: rms_norm and gemm from C++, checked on the host) built against
# the package `build` installed, through find_package; PASS/FAIL recorded.
cpp_example() {
  local out=${OUT:-build/gpu/out}
  mkdir -p "$out"
  bash examples/cpp/run.sh build/gpu/example_cpp 2>&1 | tee "$out/cpp_example.txt"
  return "${PIPESTATUS[0]}"
}

run() {
  build
  set +e
  tests
  local status=$?
  cpp_example || status=$?
  bench
  return "$status"
}

# The GPU issue's run in one device call, on the prepare_ptx gen folder (its sm_90a cubins serve
# the plain tests, its PTX the PTX mode): build, every GPU test, the C++ example, the GPU tests
# on the PTX of each arch of VERIFY_PTX (default "80 75 70"), each stage time-boxed
# (VERIFY_TEST_TIMEOUT, default 240 s), then memcheck + racecheck over VERIFY_SANITIZE (test
# files; none by default). One summary line per stage goes to $OUT/verify.txt and is printed last.
verify() {
  local out=${OUT:-build/gpu/out} status=0 rc arch files
  mkdir -p "$out"
  stage() {  # NAME CMD...: runs CMD, records "NAME rc=N (S s): last pytest line"
    local name=$1 t0=$SECONDS
    shift
    rc=0
    "$@" > "$out/$name.log" 2>&1 || rc=$?  # the script runs under set -e: a failing stage goes on
    [ "$rc" = 0 ] || status=1
    printf '%-14s rc=%s (%ss) %s\n' "$name" "$rc" "$((SECONDS - t0))" \
      "$(grep -E '(passed|failed|error)' "$out/$name.log" | tail -1)" >> "$out/verify.txt"
  }
  : > "$out/verify.txt"
  mkdir -p "$out/sm_90a"
  files=$(ls tests/test_gpu*.py | tr '\n' ' ')
  stage build build_ptx
  TEST_TIMEOUT=${VERIFY_TEST_TIMEOUT:-240} OUT="$out/sm_90a" stage tests tests $files tests/test_fuzz.py
  stage cpp_example cpp_example
  for arch in ${VERIFY_PTX-80 75 70}; do
    TEST_TIMEOUT=${VERIFY_TEST_TIMEOUT:-240} stage "ptx_$arch" tests_ptx "$arch" $files
  done
  if [ -n "${VERIFY_SANITIZE:-}" ]; then
    # shellcheck disable=SC2086
    OUT="$out/san" stage sanitize bash scripts/sanitize.sh $VERIFY_SANITIZE
    grep -h "ERROR SUMMARY" "$out"/san/*.log 2>/dev/null | sort | uniq -c >> "$out/verify.txt"
  fi
  cat "$out/verify.txt"
  return "$status"
}

"${1:?usage: gpu_check.sh prepare|build|tests|cpp_example|bench|suite|tkbench|cold_start|jit|probe|run|prepare_ptx|build_ptx|tests_ptx ARCH|verify|tilelang_tarball}" "${@:2}"
