#!/usr/bin/env bash
# The GPU tests under compute-sanitizer (issue 7.2), on the GPU machine, after the module is
# built and installed there (as `bash scripts/gpu_check.sh run` does):
#
#   bash scripts/sanitize.sh                                  # memcheck + racecheck, every GPU test file
#   bash scripts/sanitize.sh memcheck tests/test_gpu.py ...   # one tool, some files
#
# Each test file runs in its own sanitized process, so a slow file costs only itself
# (SANITIZE_TIMEOUT seconds each, default 300); sanitized kernels run 10-100x slower, so split a
# long run over several commands by naming files. PYTORCH_NO_CUDA_MEMORY_CACHING=1 makes every
# torch tensor its own allocation: torch's caching allocator otherwise hands out pieces of larger
# blocks, which hides out-of-bounds accesses from memory checkers (PyTorch docs, "CUDA semantics",
# memory management). --target-processes all follows the child processes some tests start.
#
# Only tileaot's kernels are instrumented (--kernel-name regex: extern "C" names ending in
# _kernel or _kernel_<n>; torch's kernels have mangled _Z... names): the reference computations
# then run at full speed, which is what makes the whole GPU suite fit in a few device minutes.
# SANITIZE_ALL_KERNELS=1 instruments every kernel. Files run SANITIZE_JOBS at a time (default 4).
#
# Logs go to $OUT (or build/sanitize): <tool>.<file>.log each, and every sanitizer summary line
# (plus pytest's last line) to summary.txt. Exit status: 1 if any run found an error or failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/sanitize}
mkdir -p "$out"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ ! -x "$sanitizer" ]; then
  echo "compute-sanitizer not found (on PATH or in /usr/local/cuda/bin): install the CUDA toolkit" >&2
  exit 2
fi

tools=(memcheck racecheck)
case ${1:-} in
  memcheck | racecheck | synccheck | initcheck) tools=("$1"); shift ;;
esac
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(tests/test_gpu*.py tests/test_fuzz.py)

# With the carried tarball (scripts/gpu_check.sh tilelang_tarball), TileKernels' references are
# importable, so the tests comparing with them run (and exercise their kernels) instead of skipping.
source scripts/tlsite.sh
tlsite_env || true
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
export TILEAOT_FUZZ_GPU_EXAMPLES=${TILEAOT_FUZZ_GPU_EXAMPLES:-4}  # the GPU fuzz test, per op, shortened
export TILEAOT_SANITIZE=1  # tests whose full sizes exhaust memory under the sanitizer cut them
export CACHING_FILES="test_gpu_torch_ops.py test_gpu_reliability.py"
export SANITIZE_REGEX='^[a-z][a-z0-9_]*_kernel(_[0-9]+)?$'

# Sets the caller's `filter` array (dynamic scope): tileaot's kernels only, unless
# SANITIZE_ALL_KERNELS=1. The negative control and every test run use it.
set_filter() {
  filter=()
  [ "${SANITIZE_ALL_KERNELS:-0}" = 1 ] || filter=(--kernel-name "regex=$SANITIZE_REGEX")
}

# One sanitized pytest process: its log, then its summary lines (printed as one block).
run_one() {
  local tool=$1 file=$2 log rc filter env=()
  set_filter
  log="$out/$tool.$(basename "$file" .py).log"
  # CUDA-graph capture and torch.cuda.set_per_process_memory_fraction need torch's caching
  # allocator (without it torch calls cudaMalloc while capturing, which CUDA forbids); these
  # files run with it, everything else with one allocation per tensor.
  case " $CACHING_FILES " in
    *" $(basename "$file") "*) env=(env -u PYTORCH_NO_CUDA_MEMORY_CACHING) ;;
  esac
  "${env[@]}" timeout "${SANITIZE_TIMEOUT:-300}" "$sanitizer" --tool "$tool" --target-processes all \
    "${filter[@]}" --error-exitcode 86 --print-limit 20 \
    python -m pytest "$file" -m gpu -q -p no:cacheprovider > "$log" 2>&1
  rc=$?
  {
    echo "== $tool $file (exit $rc)"
    grep -E "(ERROR|RACECHECK|SYNCCHECK|INITCHECK) SUMMARY" "$log" | sort | uniq -c
    grep -E "^[0-9]+ (passed|failed|skipped|deselected|error)|no tests ran" "$log" | tail -1
  }
  # rc 5: pytest collected no GPU test in this file (not a failure).
  [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ]
}
export -f run_one set_filter
export sanitizer out

# Negative control: a deliberate out-of-bounds launch must be caught under the same filter.
control_log="$out/control.memcheck.log"
set_filter
timeout 120 "$sanitizer" --tool memcheck "${filter[@]}" --error-exitcode 86 --print-limit 3 \
  python scripts/sanitize_control.py > "$control_log" 2>&1
control_rc=$?
{
  echo "== control: deliberate out-of-bounds rms_norm launch (exit $control_rc, expect 86)"
  grep -E "ERROR SUMMARY|Invalid __global__" "$control_log" | head -3
} >> "$out/summary.txt"
status=0
[ "$control_rc" -eq 86 ] || { echo "the negative control was not caught" >> "$out/summary.txt"; status=1; }
for tool in "${tools[@]}"; do
  printf '%s\n' "${files[@]}" |
    xargs -P "${SANITIZE_JOBS:-4}" -I{} bash -c 'run_one "$1" "$2"' _ "$tool" {} \
      >> "$out/summary.txt" || status=1
done
cat "$out/summary.txt"
exit "$status"
