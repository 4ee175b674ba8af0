set -u
mkdir -p build/gpu "$OUT/r" && tar -xJf build/gpu_carry/gen_ptx.txz -C build/gpu
cp build/gpu_carry/call1.sh "$OUT/r/"
SAN="tests/test_gpu_cast_back_e5m6.py tests/test_gpu_expand_to_fused_with_sf.py tests/test_gpu_swiglu_backward.py tests/test_gpu_mhc_pre_norm_fn_backward.py"
timeout 560 env OUT=$OUT/r/v VERIFY_PTX="80 70" VERIFY_SANITIZE="$SAN" SANITIZE_TIMEOUT=70 VERIFY_TEST_TIMEOUT=160 bash scripts/gpu_check.sh verify > "$OUT/r/verify.out" 2>&1
echo "verify rc=$?"
tar -czf "$OUT/r.tgz" -C "$OUT" r
grep -hE "^FAILED|^ERROR|^tests/.*(FAILED|ERROR)" "$OUT"/r/v/*.log 2>/dev/null | cut -c1-230 | sort | uniq | head -30
cat "$OUT/r/v/verify.txt"
