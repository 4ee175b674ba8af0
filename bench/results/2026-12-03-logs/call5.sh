set -u
mkdir -p build/gpu "$OUT/r" && tar -xJf build/gpu_carry/gen_ptx.txz -C build/gpu
S="$OUT/r/summary.txt"
step() { echo "$1 rc=$2 $3s $4" >> "$S"; }
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh build_ptx > "$OUT/r/build.log" 2>&1; step build $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh with_tilelang timeout 200 python -m pytest -q -p no:cacheprovider tests/test_gpu_mhc_pre_norm_fn.py tests/test_gpu_expand_to_fused.py tests/test_gpu_per_token_cast_e5m6.py tests/test_gpu_mhc_mixes.py tests/test_gpu_tile_kernels_compat.py tests/test_gpu_torch_ops.py tests/test_fuzz.py -k "not test_fuzz or expand_to_fused or e5m6 or mhc" > "$OUT/r/tests.log" 2>&1; step tests $? $((SECONDS-t0)) "$(tail -1 "$OUT/r/tests.log")"
t0=$SECONDS
M='mhc_pre_norm_fn|expand_to_fused|per_token_cast_e5m6|mhc_pre_split_mixes|mhc_head_compute_mix'
timeout 90 python bench/run.py --match "$M" --json "$OUT/r/ours.json" > "$OUT/r/ours.txt" 2>&1; step bench $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r TKBENCH_TIMEOUT=150 bash scripts/gpu_check.sh tkbench --match "$M" > "$OUT/r/tk.log" 2>&1; step tkbench $? $((SECONDS-t0)) ""
tar -czf "$OUT/r.tgz" -C "$OUT" r
grep -E "^FAILED|^ERROR" "$OUT/r/tests.log" | head -20
grep -vE "^host cost|^NVIDIA" "$OUT/r/ours.txt" | cut -c1-100 | head -30; grep -E "^\| " "$OUT"/r/results/*tilekernels.md 2>/dev/null | cut -d'|' -f3-7 | head -30
cat "$S"
