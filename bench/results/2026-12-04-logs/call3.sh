set -u
mkdir -p build/gpu "$OUT/r" && tar -xJf build/gpu_carry/gen_ptx.txz -C build/gpu
cp build/gpu_carry/call3.sh "$OUT/r/"
S="$OUT/r/summary.txt"
step() { echo "$1 rc=$2 $3s $4" >> "$S"; }
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh build_ptx > "$OUT/r/build.log" 2>&1; step build $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh with_tilelang timeout 120 python -m pytest -q -p no:cacheprovider tests/test_gpu_swiglu_backward.py tests/test_gpu_per_channel_cast_fused.py tests/test_gpu_tile_kernels_compat.py tests/test_fuzz.py -m gpu -k "not test_fuzz or swiglu_backward or per_channel_cast" > "$OUT/r/tests.log" 2>&1; step tests $? $((SECONDS-t0)) "$(tail -1 "$OUT/r/tests.log")"
t0=$SECONDS
OUT=$OUT/r/san SANITIZE_JOBS=1 SANITIZE_TIMEOUT=60 timeout 110 bash scripts/sanitize.sh memcheck tests/test_gpu_swiglu_backward.py tests/test_gpu_mhc_pre_norm_fn_backward.py tests/test_gpu_per_channel_cast_fused.py > "$OUT/r/san.log" 2>&1; step memcheck $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r/race SANITIZE_JOBS=2 SANITIZE_TIMEOUT=60 timeout 110 bash scripts/sanitize.sh racecheck tests/test_gpu_swiglu_backward.py tests/test_gpu_mhc_pre_norm_fn_backward.py tests/test_gpu_per_channel_cast_fused.py tests/test_gpu_cast_back_e5m6.py tests/test_gpu_expand_to_fused_with_sf.py > "$OUT/r/race.log" 2>&1; step racecheck $? $((SECONDS-t0)) ""
t0=$SECONDS
timeout 40 python bench/run.py --match 'swiglu_backward' --json "$OUT/r/ours.json" > "$OUT/r/ours.txt" 2>&1; step bench $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r TKBENCH_TIMEOUT=60 bash scripts/gpu_check.sh tkbench --match 'swiglu_backward' > "$OUT/r/tk.log" 2>&1; step tkbench $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r timeout 70 bash scripts/gpu_check.sh probe 'mhc_pre_norm_fn_backward|expand_to_fused_with_sf|per_channel_cast_fused' > "$OUT/r/probe.txt" 2>&1; step probe $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r/p75 TEST_TIMEOUT=130 timeout 140 bash scripts/gpu_check.sh tests_ptx 75 $(ls tests/test_gpu*.py) > "$OUT/r/ptx75.log" 2>&1; step ptx_75 $? $((SECONDS-t0)) "$(grep -E 'passed|failed' "$OUT/r/ptx75.log" | tail -1)"
tar -czf "$OUT/r.tgz" -C "$OUT" r
grep -hE "^FAILED|^ERROR" "$OUT/r/tests.log" "$OUT/r/ptx75.log" | cut -c1-200 | head -15
cat "$OUT"/r/san/summary.txt "$OUT"/r/race/summary.txt 2>/dev/null | grep -v "^=========  " | head -40
grep -vE "^host cost|^NVIDIA" "$OUT/r/ours.txt" | cut -c1-100 | head -8; grep -E "^\| " "$OUT"/r/results/*tilekernels.md 2>/dev/null | cut -d'|' -f2-7 | head -8
cat "$S"
