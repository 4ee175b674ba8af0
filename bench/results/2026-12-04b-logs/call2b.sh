set -u
mkdir -p build/gpu "$OUT/r" && tar -xJf build/gpu_carry/gen_ptx.txz -C build/gpu
cp build/gpu_carry/call2b.sh "$OUT/r/"
S="$OUT/r/summary.txt"
step() { echo "$1 rc=$2 $3s $4" >> "$S"; }
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh build_ptx > "$OUT/r/build.log" 2>&1; step build $? $((SECONDS-t0)) ""
t0=$SECONDS
TUNE_TIMEOUT=200 bash scripts/gpu_check.sh tune 'swiglu_per_token_cast_fp8 bf16 w \(generic' 'GROUPS=8' 'GROUPS=16' 'GROUPS=32' 'GROUPS=16;THREADS=256' > "$OUT/r/tune_generic.txt" 2>&1; step tune_generic $? $((SECONDS-t0)) ""
t0=$SECONDS
TUNE_TIMEOUT=120 bash scripts/gpu_check.sh tune 'swiglu_per_token_cast_fp8 bf16 w' 'GROUPS=8' 'GROUPS=16' > "$OUT/r/tune_7168.txt" 2>&1; step tune_7168 $? $((SECONDS-t0)) ""
source scripts/tlsite.sh; tlsite_env
t0=$SECONDS
timeout 60 env PYTHONPATH=$PWD:$PYTHONPATH python build/gpu_carry/diag_eff.py > "$OUT/r/diag_cache_on.txt" 2>&1; step diag_on $? $((SECONDS-t0)) ""
t0=$SECONDS
timeout 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 PYTHONPATH=$PWD:$PYTHONPATH python build/gpu_carry/diag_eff.py > "$OUT/r/diag_cache_off.txt" 2>&1; step diag_off $? $((SECONDS-t0)) ""
t0=$SECONDS
timeout 120 compute-sanitizer --tool racecheck --kernel-name 'regex=get_fused_mapping' env PYTORCH_NO_CUDA_MEMORY_CACHING=1 PYTHONPATH=$PWD:$PYTHONPATH python build/gpu_carry/diag_eff.py > "$OUT/r/diag_race_tk.txt" 2>&1; step diag_race_tk $? $((SECONDS-t0)) ""
tar -czf "$OUT/r.tgz" -C "$OUT" r
tail -8 "$OUT"/r/tune_generic.txt "$OUT"/r/tune_7168.txt | cut -c1-200
tail -9 "$OUT"/r/diag_cache_on.txt; tail -9 "$OUT"/r/diag_cache_off.txt; grep -vE "^========= +(at|by|Saved|in |Write|Read)" "$OUT"/r/diag_race_tk.txt | tail -12
cat "$S"
