"""Checks the nanobind module built against registry_fake.cpp.

usage: test_module.py BUILD_DIR nodriver|fake   (fake: LD_LIBRARY_PATH has the fake libcuda.so.1)
"""

import sys
import time

sys.path.insert(0, sys.argv[1])
import _C  # noqa: E402

MODE = sys.argv[2]
PTRS = (0x1000, 0x2000, 0x3000)
SHAPES = (3, 4096, 4096, 3, 4096)  # x[3,4096] weight[4096] y[3,4096]


def raises(exc, fn, *args, match=""):
    try:
        fn(*args)
    except exc as e:
        assert match in str(e), f"{match!r} not in {e}"
        return str(e)
    raise AssertionError(f"{fn.__name__}{args} did not raise {exc.__name__}")


assert issubclass(_C.VariantMissError, LookupError)
assert issubclass(_C.DriverError, RuntimeError)
rms = _C.lookup("rms_norm", "bf16")
assert rms == 3 and _C.lookup("gemm", "bf16") == 0
print(raises(_C.VariantMissError, _C.lookup, "rms_norm", "fp32", match="keys built: bf16, fp16"))
raises(LookupError, _C.lookup, "softmax", "bf16", match="ops built: gemm, rms_norm")

rows = _C.variants()
assert len(rows) == 9 and rows[0]["name"] == "gemm_bf16_any" and rows[2]["blob_arch"] == "sm_90"
assert set(rows[0]) == {"name", "op", "key", "spec", "arch", "signature", "blob_arch"}
assert _C.build_archs() == "sm_80,sm_86,sm_90,sm_90a,sm_100a" and _C.build_ops() == "*"

# Bad arguments: ValueError / TypeError / OverflowError, before any driver use.
raises(ValueError, _C.launch, rms, 0, 0, PTRS[:2], SHAPES, (1e-6,), match="takes 3 tensors")
raises(ValueError, _C.launch, rms, 0, 0, PTRS, SHAPES[:4], (1e-6,), match="shape values")
raises(ValueError, _C.launch, rms, 0, 0, PTRS, SHAPES, (), match="takes 1 scalars")
raises(ValueError, _C.launch, rms, 0, 0, (0, 1, 2), SHAPES, (1e-6,), match="NULL data pointer")
raises(ValueError, _C.launch, rms + 1, 0, 0, PTRS, SHAPES, (1e-6,), match="invalid handle")
raises(ValueError, _C.launch, rms, 0, 0, tuple(range(1, 40)), SHAPES, (1e-6,), match="too many")
raises(TypeError, _C.launch, rms, 0, 0, {1, 2, 3}, SHAPES, (1e-6,))
raises(TypeError, _C.launch, rms, 0, 0, (1.5, 2, 3), SHAPES, (1e-6,))
raises(OverflowError, _C.launch, rms, 0, 0, (-1, 2, 3), SHAPES, (1e-6,))
raises(TypeError, _C.launch, rms, 0, 0, PTRS, SHAPES, ("x",))

if MODE == "nodriver":
    msg = raises(
        _C.DriverError,
        _C.launch,
        rms,
        0,
        0,
        PTRS,
        SHAPES,
        (1e-6,),
        match="CUDA driver (libcuda.so.1) not found",
    )
    print(msg)
    raises(RuntimeError, _C.select, rms, 0, SHAPES, match="not found")
    assert _C.device_arch(0) is None
else:
    assert _C.device_arch(0) == "sm_89" and _C.device_arch(1) == "sm_90a"
    assert _C.device_arch(7) is None
    assert _C.select(rms, 0, list(SHAPES)) == "rms_norm_bf16_n4096"
    assert _C.select(rms, 1, (3, 1024, 1024, 3, 1024)) == "rms_norm_bf16_any"
    print(
        raises(
            _C.VariantMissError,
            _C.select,
            rms,
            0,
            (3, 1001, 1001, 3, 1001),
            match="on device 0 (sm_89)",
        )
    )
    _C.launch(rms, 0, 0x5150, list(PTRS), list(SHAPES), [1e-6])
    _C.launch(rms, 0, 0, PTRS, SHAPES, (1,))  # int scalar accepted as float

    def per_call_us(fn, *args, n=200_000):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        return (time.perf_counter() - t0) / n * 1e6

    def noop(*args):
        return None

    base = per_call_us(noop, rms, 0, 0, PTRS, SHAPES, (1e-6,))
    full = per_call_us(_C.launch, rms, 0, 0, PTRS, SHAPES, (1e-6,))
    print(f"launch via fake driver: {full:.3f} us/call (python no-op call: {base:.3f} us)")
print(f"python {MODE}: ok")
