set -u
mkdir -p build/gpu "$OUT/r" && tar -xJf build/gpu_carry/gen_ptx.txz -C build/gpu
cp build/gpu_carry/call3.sh "$OUT/r/"
S="$OUT/r/summary.txt"
step() { echo "$1 rc=$2 $3s $4" >> "$S"; }
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh build_ptx > "$OUT/r/build.log" 2>&1; step build $? $((SECONDS-t0)) ""
F="tests/test_gpu_mhc_pre_norm_fn.py tests/test_gpu_mhc_pre_norm_fn_backward.py tests/test_gpu_engram_fused_weight.py tests/test_gpu_engram_grad_w_reduce.py"
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh with_tilelang timeout 150 python -m pytest -q -p no:cacheprovider $F tests/test_gpu_swiglu.py tests/test_gpu_tile_kernels_compat.py tests/test_gpu_torch_ops.py tests/test_gpu_expand_to_fused_with_sf.py tests/test_fuzz.py -m gpu -k "not test_fuzz or mhc_pre_norm_fn or engram or swiglu_per_token" > "$OUT/r/tests.log" 2>&1; step tests $? $((SECONDS-t0)) "$(tail -1 "$OUT/r/tests.log")"
M='mhc_pre_norm_fn|engram_fused_weight|engram_grad_w_reduce|swiglu_per_token_cast_fp8'
t0=$SECONDS
timeout 50 python bench/run.py --match "$M" --json "$OUT/r/ours.json" > "$OUT/r/ours.txt" 2>&1; step bench $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r TKBENCH_TIMEOUT=100 bash scripts/gpu_check.sh tkbench --match 'mhc_pre_norm_fn|engram_fused_weight|engram_grad_w_reduce' > "$OUT/r/tk.log" 2>&1; step tkbench $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r/san SANITIZE_JOBS=2 SANITIZE_TIMEOUT=90 timeout 100 bash scripts/sanitize.sh memcheck $F > "$OUT/r/san.log" 2>&1; step memcheck $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r/p80 TEST_TIMEOUT=60 timeout 70 bash scripts/gpu_check.sh tests_ptx 80 tests/test_gpu_mhc_pre_norm_fn.py tests/test_gpu_mhc_pre_norm_fn_backward.py > "$OUT/r/ptx80.log" 2>&1; step ptx_80 $? $((SECONDS-t0)) "$(grep -E 'passed|failed' "$OUT/r/ptx80.log" | tail -1)"
tar -czf "$OUT/r.tgz" -C "$OUT" r
grep -hE "^FAILED|^ERROR" "$OUT/r/tests.log" "$OUT/r/ptx80.log" | cut -c1-220 | head -20
cat "$OUT"/r/san/summary.txt 2>/dev/null | grep -v "^=========  " | head -20
grep -vE "^host cost|^NVIDIA" "$OUT/r/ours.txt" | cut -c1-110 | head -30; grep -E "^\| " "$OUT"/r/results/*tilekernels.md 2>/dev/null | cut -d'|' -f2-7 | head -20
cat "$S"
