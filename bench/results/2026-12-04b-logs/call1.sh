set -u
mkdir -p build/gpu "$OUT/r" && tar -xJf build/gpu_carry/gen_ptx.txz -C build/gpu
cp build/gpu_carry/call1.sh "$OUT/r/"
S="$OUT/r/summary.txt"
step() { echo "$1 rc=$2 $3s $4" >> "$S"; }
t0=$SECONDS
OUT=$OUT/r bash scripts/gpu_check.sh build_ptx > "$OUT/r/build.log" 2>&1; step build $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r SUITE_TIMEOUT=250 bash scripts/gpu_check.sh suite --skip jit_prewarm jit > "$OUT/r/suite.log" 2>&1; step suite $? $((SECONDS-t0)) ""
t0=$SECONDS
OUT=$OUT/r/race SANITIZE_JOBS=1 SANITIZE_TIMEOUT=100 timeout 105 bash scripts/sanitize.sh racecheck tests/test_gpu_expand_to_fused_with_sf.py > "$OUT/r/race.log" 2>&1; step racecheck $? $((SECONDS-t0)) ""
for a in 80 70; do
t0=$SECONDS
OUT=$OUT/r/p$a TEST_TIMEOUT=60 timeout 70 bash scripts/gpu_check.sh tests_ptx $a tests/test_gpu_swiglu_backward.py > "$OUT/r/ptx$a.log" 2>&1; step ptx_$a $? $((SECONDS-t0)) "$(grep -E 'passed|failed' "$OUT/r/ptx$a.log" | tail -1)"
done
t0=$SECONDS
OUT=$OUT/r timeout 60 bash scripts/gpu_check.sh probe 'per_channel_cast_fused|expand_to_fused_with_sf' 'per_channel_cast_fused|expand_to_fused_with_sf' > "$OUT/r/probe.txt" 2>&1; step probe $? $((SECONDS-t0)) ""
tar -czf "$OUT/r.tgz" -C "$OUT" r
grep -hE "^FAILED|^ERROR" "$OUT"/r/ptx*.log | cut -c1-200 | head -10
cat "$OUT"/r/race/summary.txt 2>/dev/null | grep -v "^=========  " | head -10
tail -25 "$OUT/r/suite.log" | cut -c1-160
cat "$S"
