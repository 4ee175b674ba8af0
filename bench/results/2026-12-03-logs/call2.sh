set -u
mkdir -p build/gpu "$OUT/r" && tar -xzf build/gpu_carry/gen_ptx.tgz -C build/gpu
S="$OUT/r/summary.txt"
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh build_ptx > "$OUT/r/build.log" 2>&1; echo "build rc=$? $((SECONDS-t0))s" >> "$S"
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh with_tilelang timeout 120 python -m pytest -q -p no:cacheprovider tests/test_gpu_normalize_weight.py tests/test_gpu_group_count.py tests/test_gpu_aux_fi.py tests/test_gpu_tile_kernels_compat.py -k "normalize_weight or group_count or aux_fi or weight or count" > "$OUT/r/tests.log" 2>&1; echo "tests rc=$? $((SECONDS-t0))s $(tail -1 "$OUT/r/tests.log")" >> "$S"
t0=$SECONDS
timeout 90 python bench/run.py --match 'normalize_weight|group_count|aux_fi' --json "$OUT/r/ours.json" > "$OUT/r/ours.txt" 2>&1; echo "bench rc=$? $((SECONDS-t0))s" >> "$S"
t0=$SECONDS
OUT=$OUT/r TKBENCH_TIMEOUT=150 bash scripts/gpu_check.sh tkbench --match 'normalize_weight|group_count|aux_fi' > "$OUT/r/tk.log" 2>&1; echo "tkbench rc=$? $((SECONDS-t0))s" >> "$S"
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
san() {  # NAME TIMEOUT PYTEST-ARGS...
  local name=$1 to=$2 t0=$SECONDS; shift 2
  timeout "$to" compute-sanitizer --tool initcheck --kernel-name 'regex=^engram_gate.*_kernel(_[0-9]+)?$' --print-limit 12 \
    python -m pytest -v -p no:cacheprovider tests/test_gpu_engram_gate.py "$@" > "$OUT/r/initcheck_$name.log" 2>&1
  echo "initcheck $name rc=$? $((SECONDS-t0))s" >> "$S"
}
san fwd 110 -k "test_forward and not shared"
san fwdshared 80 -k "test_forward_shared_value"
tar -czf "$OUT/r.tgz" -C "$OUT" r
for f in "$OUT"/r/initcheck_*.log; do echo "== $f"; grep -E "ERROR SUMMARY|passed|failed" "$f" | tail -2; grep -A4 -m1 "Uninitialized" "$f"; done
grep -E "normalize|group_count|aux_fi" "$OUT/r/ours.txt" | head; grep -E "normalize|group_count|aux_fi" "$OUT/r/tk.log" | head
cat "$S"
