#!/usr/bin/env bash
# The GPU check flow, in two halves (the GPU machine has no tilelang and no internet):
#
#   here:  bash scripts/gpu_check.sh prepare      # trace + compile sm_90a cubins into build/gpu/gen
#   there: bash scripts/gpu_check.sh run          # build the module on them, GPU tests, bench
#
# `run` is what the device tool executes, with carry=["build/gpu"]; logs go to $OUT (or
# build/gpu/out). The cubins tested are the ones this machine's NVRTC 12.9 made, i.e. the
# same bytes a wheel built here ships.
set -euo pipefail
cd "$(dirname "$0")/.."
GEN=build/gpu/gen
ARCHS=${TILEAOT_GPU_ARCHS:-90a}

prepare() {
  python -m build_tools generate --out "$GEN" --archs "$ARCHS"
  python -m build_tools compile-all "$GEN"
}

run() {
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
  set +e
  # GPU tests only (the CPU suite runs in CI), each result streamed (-v) so a hang still
  # leaves a record; a full-suite run once hung past 600 s in CPU tests on this machine.
  TILEAOT_REDUCED_BUILD=1 timeout 300 python -m pytest tests -m gpu -v -p no:cacheprovider \
    --continue-on-collection-errors --tb=short 2>&1 | tee "$out/pytest.txt"
  local status=${PIPESTATUS[0]}
  timeout 240 python bench/run.py --json "$out/bench.json" 2>&1 | tee "$out/bench.txt"
  return "$status"
}

"${1:?usage: gpu_check.sh prepare|run}"
