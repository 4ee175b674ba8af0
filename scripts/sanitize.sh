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

export PYTORCH_NO_CUDA_MEMORY_CACHING=1
export TILEAOT_FUZZ_GPU_EXAMPLES=${TILEAOT_FUZZ_GPU_EXAMPLES:-4}  # the GPU fuzz test, per op, shortened
status=0
for tool in "${tools[@]}"; do
  for file in "${files[@]}"; do
    log="$out/$tool.$(basename "$file" .py).log"
    timeout "${SANITIZE_TIMEOUT:-300}" "$sanitizer" --tool "$tool" --target-processes all \
      --error-exitcode 86 --print-limit 20 \
      python -m pytest "$file" -m gpu -q -p no:cacheprovider > "$log" 2>&1
    rc=$?
    # rc 5: pytest collected no GPU test in this file (not a failure).
    [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ] || status=1
    {
      echo "== $tool $file (exit $rc)"
      grep -E "(ERROR|RACECHECK|SYNCCHECK|INITCHECK) SUMMARY" "$log" | sort | uniq -c
      grep -E "^[0-9]+ (passed|failed|skipped|deselected|error)|no tests ran" "$log" | tail -1
    } | tee -a "$out/summary.txt"
  done
done
exit "$status"
