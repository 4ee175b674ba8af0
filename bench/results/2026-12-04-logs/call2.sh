set -u
mkdir -p build/gpu "$OUT/r" && tar -xJf build/gpu_carry/gen_ptx.txz -C build/gpu
cp build/gpu_carry/call2.sh "$OUT/r/"
S="$OUT/r/summary.txt"
step() { echo "$1 rc=$2 $3s $4" >> "$S"; }
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh build_ptx > "$OUT/r/build.log" 2>&1; step build $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh with_tilelang timeout 130 python -m pytest -q -p no:cacheprovider tests/test_gpu_per_channel_cast_fused.py tests/test_gpu_per_channel_cast_fp8.py tests/test_gpu_swiglu_backward.py tests/test_gpu_tile_kernels_compat.py tests/test_fuzz.py -m gpu -k "not test_fuzz or swiglu_backward or per_channel_cast" > "$OUT/r/tests.log" 2>&1; step tests $? $((SECONDS-t0)) "$(tail -1 "$OUT/r/tests.log")"
( while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$OUT/r/smi.log"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader >> "$OUT/r/smi_apps.log"; sleep 3; done ) & SMI=$!
t0=$SECONDS
OUT=$OUT/r/san SANITIZE_JOBS=2 SANITIZE_TIMEOUT=70 timeout 160 bash scripts/gpu_check.sh with_tilelang bash scripts/sanitize.sh memcheck tests/test_gpu_cast_back_e5m6.py tests/test_gpu_expand_to_fused_with_sf.py tests/test_gpu_swiglu_backward.py tests/test_gpu_mhc_pre_norm_fn_backward.py tests/test_gpu_per_channel_cast_fused.py > "$OUT/r/san.log" 2>&1; step memcheck $? $((SECONDS-t0)) ""
kill $SMI
t0=$SECONDS
M='cast_back_e5m6|expand_to_fused_with_sf|swiglu_backward|mhc_pre_norm_fn_backward|per_channel_cast_fused'
timeout 60 python bench/run.py --match "$M" --json "$OUT/r/ours.json" > "$OUT/r/ours.txt" 2>&1; step bench $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r TKBENCH_TIMEOUT=150 bash scripts/gpu_check.sh tkbench --match "$M" > "$OUT/r/tk.log" 2>&1; step tkbench $? $((SECONDS-t0)) ""
tar -czf "$OUT/r.tgz" -C "$OUT" r
grep -E "^FAILED|^ERROR" "$OUT/r/tests.log" | cut -c1-200 | head -15
cat "$OUT"/r/san/summary.txt 2>/dev/null | head -30
sort -n "$OUT/r/smi.log" | tail -1
grep -vE "^host cost|^NVIDIA" "$OUT/r/ours.txt" | cut -c1-100 | head -30; grep -E "^\| " "$OUT"/r/results/*tilekernels.md 2>/dev/null | cut -d'|' -f2-7 | head -30
cat "$S"
