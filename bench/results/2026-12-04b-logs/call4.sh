set -u
mkdir -p build/gpu "$OUT/r" && tar -xJf build/gpu_carry/gen_ptx.txz -C build/gpu
cp build/gpu_carry/call4.sh "$OUT/r/"
S="$OUT/r/summary.txt"
step() { echo "$1 rc=$2 $3s $4" >> "$S"; }
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh build_ptx > "$OUT/r/build.log" 2>&1; step build $? $((SECONDS-t0)) ""
F="tests/test_gpu_expand_to_fused.py tests/test_gpu_expand_to_fused_with_sf.py tests/test_gpu_per_channel_cast_and_transpose.py tests/test_gpu_swiglu_per_channel_cast_and_transpose.py tests/test_gpu_per_block_cast_lossless.py tests/test_gpu_mhc_pre_norm_fn_backward.py tests/test_gpu_tile_kernels_compat.py tests/test_gpu.py tests/test_gpu_torch_ops.py"
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh with_tilelang timeout 165 python -m pytest -q -p no:cacheprovider $F -m gpu > "$OUT/r/tests.log" 2>&1; step tests $? $((SECONDS-t0)) "$(tail -1 "$OUT/r/tests.log")"
M='expand_to_fused|per_channel_cast_and_transpose|per_block_cast_lossless'
t0=$SECONDS
timeout 40 python bench/run.py --match "$M" --json "$OUT/r/ours.json" > "$OUT/r/ours.txt" 2>&1; step bench $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r TKBENCH_TIMEOUT=90 bash scripts/gpu_check.sh tkbench --match "$M" > "$OUT/r/tk.log" 2>&1; step tkbench $? $((SECONDS-t0)) ""
tar -czf "$OUT/r.tgz" -C "$OUT" r
grep -hE "^FAILED|^ERROR" "$OUT/r/tests.log" | cut -c1-200 | head -25
grep -vE "^host cost|^NVIDIA" "$OUT/r/ours.txt" | cut -c1-110 | head -20; grep -E "^\| " "$OUT"/r/results/*tilekernels.md 2>/dev/null | cut -d'|' -f2-7 | head -20
cat "$S"
