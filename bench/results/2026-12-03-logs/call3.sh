set -u
mkdir -p build/gpu "$OUT/r" && tar -xJf build/gpu_carry/gen_ptx.txz -C build/gpu
S="$OUT/r/summary.txt"
step() { echo "$1 rc=$2 $3s $4" >> "$S"; }
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh build_ptx > "$OUT/r/build.log" 2>&1; step build $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh with_tilelang timeout 150 python -m pytest -q -p no:cacheprovider tests/test_gpu_per_channel_cast_fp8.py tests/test_gpu_mhc_pre_norm_fn.py tests/test_gpu_tile_kernels_compat.py tests/test_gpu_torch_ops.py > "$OUT/r/tests.log" 2>&1; step tests $? $((SECONDS-t0)) "$(tail -1 "$OUT/r/tests.log")"
t0=$SECONDS
timeout 90 python bench/run.py --match 'per_channel_cast_fp8|mhc_pre_norm_fn|per_block_cast_fp8' --json "$OUT/r/ours.json" > "$OUT/r/ours.txt" 2>&1; step bench $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r TKBENCH_TIMEOUT=150 bash scripts/gpu_check.sh tkbench --match 'per_channel_cast_fp8|mhc_pre_norm_fn|per_block_cast_fp8' > "$OUT/r/tk.log" 2>&1; step tkbench $? $((SECONDS-t0)) ""
t0=$SECONDS
timeout 150 compute-sanitizer --tool initcheck --kernel-name 'regex=^engram_gate' --print-limit 20 python bench/initcheck_engram_gate.py > "$OUT/r/initcheck.log" 2>&1; step initcheck $? $((SECONDS-t0)) "$(grep -E 'ERROR SUMMARY' "$OUT/r/initcheck.log" | tail -1)"
tar -czf "$OUT/r.tgz" -C "$OUT" r
grep -E "FAILED|Error" "$OUT/r/tests.log" | head -15
grep -E "per_channel|mhc_pre_norm|per_block" "$OUT/r/ours.txt" | head; grep -E "\| (per_channel|mhc_pre_norm|per_block)" "$OUT"/r/results/*tilekernels.md 2>/dev/null | head
grep -E "Uninitialized|cases done|ERROR SUMMARY" "$OUT/r/initcheck.log" | head -8
cat "$S"
