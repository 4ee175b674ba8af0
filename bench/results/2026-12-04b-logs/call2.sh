set -u
mkdir -p build/gpu "$OUT/r" && tar -xJf build/gpu_carry/gen_ptx.txz -C build/gpu
cp build/gpu_carry/call2.sh "$OUT/r/"
S="$OUT/r/summary.txt"
step() { echo "$1 rc=$2 $3s $4" >> "$S"; }
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh build_ptx > "$OUT/r/build.log" 2>&1; step build $? $((SECONDS-t0)) ""
source scripts/tlsite.sh; tlsite_env
t0=$SECONDS
timeout 100 env PYTHONPATH=$PWD:$PYTHONPATH python build/gpu_carry/diag_eff.py > "$OUT/r/diag_cache_on.txt" 2>&1; step diag_on $? $((SECONDS-t0)) ""
t0=$SECONDS
timeout 100 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 PYTHONPATH=$PWD:$PYTHONPATH python build/gpu_carry/diag_eff.py > "$OUT/r/diag_cache_off.txt" 2>&1; step diag_off $? $((SECONDS-t0)) ""
t0=$SECONDS
timeout 150 compute-sanitizer --tool racecheck --kernel-name 'regex=get_fused_mapping' env PYTORCH_NO_CUDA_MEMORY_CACHING=1 PYTHONPATH=$PWD:$PYTHONPATH python build/gpu_carry/diag_eff.py > "$OUT/r/diag_race_tk.txt" 2>&1; step diag_race_tk $? $((SECONDS-t0)) ""
t0=$SECONDS
ncu --clock-control none -k "regex:swiglu_per_token_cast_fp8" --launch-skip 0 --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats python bench/ncu_probe.py 'swiglu_per_token_cast_fp8 bf16 w' > "$OUT/r/ncu_swiglu.txt" 2>&1; step ncu $? $((SECONDS-t0)) ""
tar -czf "$OUT/r.tgz" -C "$OUT" r
tail -12 "$OUT"/r/diag_cache_on.txt "$OUT"/r/diag_cache_off.txt; grep -vE "^========= +(at|by|Saved|in |Write|Read)" "$OUT"/r/diag_race_tk.txt | tail -14
grep -E "^  [a-z_0-9]+_kernel|Duration|DRAM Through|L2 Hit|Achieved Occ|Registers|Mem Busy|Max Bandwidth|No Eligible|Waves" "$OUT/r/ncu_swiglu.txt" | head -60
cat "$S"
