"""GPU tests of the torch-free path: ops on DLPack arrays in a process without torch or CuPy.

Each test runs one ``check_*`` function below in a fresh interpreter where
``sys.modules['torch'] = None`` (and ``['cupy'] = None``), so ``import torch`` fails there: the
inputs are `tests/_cuda_array.CudaArray`s (device memory through the driver API and ctypes,
exported by DLPack), outputs come from its ``__array_namespace__().empty`` or ``out=``, and
results are copied back to numpy and compared with numpy float64 references:

* rms_norm, swiglu (bf16 in and out, made from numpy uint16 bit patterns): within one bf16 ulp
  (``rtol = 2**-7``; the kernel rounds once, at most half an ulp) plus ``atol = 1e-5``.
* per_token_cast_fp8 (bf16 in, g128 and per token): scales and e4m3 codes bit-exact against
  the float32 recipe (``max(amax, 1e-4) / 448``, IEEE division, round to nearest even,
  saturating at 448). The fp8 output needs ``out=`` (the namespace has no float8: the call
  without it must raise the TypeError that says so).
* topk_gate (fp32, specialised E = 256 and generic E = 100), on a stream of its own through
  ``tileaot.use_stream``: indices exact, weights within 1e-5 relative; each array was exported
  for that stream.
* If CuPy is importable (torch still blocked): rms_norm on cupy arrays on a CuPy stream.

The pytest process itself may have torch (tests/conftest.py uses it to find the GPU).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
TESTS = Path(__file__).resolve().parent


def _child(check: str, blocked: tuple[str, ...] = ("torch", "cupy")) -> subprocess.CompletedProcess:
    pytest.importorskip("numpy")  # the child's references and host copies
    import tileaot  # the package under test: the child imports the same one

    code = "import sys\n"
    code += "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
    code += f"import test_gpu_dlpack\ntest_gpu_dlpack.{check}()\n"
    code += "loaded = [m for m in sys.modules if m.split('.')[0] in ('torch', 'cupy')]\n"
    code += (
        f"assert all(sys.modules[m] is None for m in loaded if m.split('.')[0] in {blocked!r})\n"
    )
    code += "print('CHECK PASSED')\n"
    paths = [str(TESTS), str(Path(tileaot.__file__).resolve().parent.parent)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.parametrize(
    "check", ["check_rms_norm", "check_swiglu", "check_per_token_cast_fp8", "check_topk_gate"]
)
def test_op_without_torch_or_cupy(check):
    done = _child(check)
    assert done.returncode == 0 and "CHECK PASSED" in done.stdout, done.stdout + done.stderr


def test_cupy_arrays_without_torch():
    done = _child("check_cupy", blocked=("torch",))
    if "SKIP: cupy is not importable" in done.stdout:
        pytest.skip("cupy is not importable")
    assert done.returncode == 0 and "CHECK PASSED" in done.stdout, done.stdout + done.stderr


# --- run in the child ---------------------------------------------------------------------------


def _bf16_bits(x):
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even."""
    import numpy as np

    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _bf16_values(bits):
    import numpy as np

    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _assert_close(got, ref, rtol, atol, what):
    import numpy as np

    err = np.abs(got - ref) - (atol + rtol * np.abs(ref))
    worst = np.unravel_index(np.argmax(err), err.shape)
    assert err[worst] <= 0, f"{what}: at {worst} got {got[worst]!r}, want {ref[worst]!r}"


def check_rms_norm():
    import numpy as np
    import tileaot
    from _cuda_array import NAMESPACE, CudaArray

    rng = np.random.default_rng(1)
    for m, n in ((64, 4096), (5, 1536)):  # a specialised and a generic variant
        xb = _bf16_bits(rng.standard_normal((m, n)))
        wb = _bf16_bits(rng.uniform(0.5, 1.5, n))
        x, w = CudaArray.from_numpy(xb, "bfloat16"), CudaArray.from_numpy(wb, "bfloat16")
        y = tileaot.rms_norm(x, w, 1e-6)
        assert type(y) is CudaArray and (y.shape, y.dtype) == ((m, n), "bfloat16")
        assert NAMESPACE.allocated[-1] == ((m, n), "bfloat16")
        xf, wf = _bf16_values(xb), _bf16_values(wb)
        ref = xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + 1e-6) * wf
        _assert_close(_bf16_values(y.numpy()), ref, 2**-7, 1e-5, f"rms_norm [{m}, {n}]")
        out = CudaArray((m, n), "bfloat16")
        assert tileaot.rms_norm(x, w, 1e-6, out=out) is out
        assert np.array_equal(out.numpy(), y.numpy())


def check_swiglu():
    import numpy as np
    import tileaot
    from _cuda_array import CudaArray

    rng = np.random.default_rng(2)
    for m, h in ((32, 2048), (7, 1000)):
        xb = _bf16_bits(rng.standard_normal((m, 2 * h)) * 2)
        y = tileaot.swiglu(CudaArray.from_numpy(xb, "bfloat16"))
        assert type(y) is CudaArray and (y.shape, y.dtype) == ((m, h), "bfloat16")
        g, u = _bf16_values(xb[:, :h]), _bf16_values(xb[:, h:])
        _assert_close(_bf16_values(y.numpy()), g / (1 + np.exp(-g)) * u, 2**-7, 1e-5, "swiglu")


def _e4m3_codes(v):
    """float64 values (|v| <= 448) -> e4m3fn codes, rounded to nearest even."""
    import numpy as np

    c = np.arange(127)
    e, mant = c >> 3, c & 7
    table = np.where(e == 0, mant / 8 * 2.0**-6, (1 + mant / 8) * 2.0 ** (e - 7))  # ascending
    a = np.abs(v)
    hi = np.clip(np.searchsorted(table, a), 1, 126)
    lo = hi - 1
    below, above = a - table[lo], table[hi] - a
    pick = np.where(below < above, lo, np.where(above < below, hi, np.where(lo % 2, hi, lo)))
    return (pick | (np.signbit(v).astype(np.int64) << 7)).astype(np.uint8)


def check_per_token_cast_fp8():
    import numpy as np
    import tileaot
    from _cuda_array import CudaArray

    rng = np.random.default_rng(3)
    m, n = 48, 7168
    xb = _bf16_bits(rng.standard_normal((m, n)) * 3)
    xb[5] = 0  # an all-zero row: the 1e-4 amax floor
    x = CudaArray.from_numpy(xb, "bfloat16")
    try:
        tileaot.per_token_cast_fp8(x)
    except TypeError as e:
        assert "pass out=" in str(e) and "float8_e4m3fn" in str(e), e
    else:
        raise AssertionError("allocating float8 in a namespace without it must raise")
    for group in (128, None):
        groups = n // 128 if group else 1
        q = CudaArray((m, n), "float8_e4m3fn")
        scale = CudaArray((m, groups), "float32")
        got = tileaot.per_token_cast_fp8(x, group, out=(q, scale))
        assert got[0] is q and got[1] is scale
        xg = _bf16_values(xb).astype(np.float32).reshape(m, groups, -1)
        amax = np.maximum(np.abs(xg).max(-1, keepdims=True), np.float32(1e-4))
        scale_ref = amax / np.float32(448)  # float32 division, as the kernel
        # TileKernels' quotient: x times RN(448 / amax), the product rounded to float32 first.
        inv = np.float32(448) / amax
        prod = (xg * inv).astype(np.float32).astype(np.float64)
        q_ref = _e4m3_codes(np.clip(prod, -448, 448)).reshape(m, n)
        assert np.array_equal(scale.numpy(), scale_ref.reshape(m, groups)), f"scales g={group}"
        diff = np.argwhere(q.numpy() != q_ref)
        assert diff.size == 0, f"g={group}: {len(diff)} codes differ, first at {diff[0]}"


def check_topk_gate():
    import numpy as np
    import tileaot
    from _cuda_array import CudaArray, Stream

    rng = np.random.default_rng(4)
    stream = Stream()
    for t, e, k, scoring, renormalize in (
        (300, 256, 8, "softmax", True),
        (9, 100, 6, "sigmoid", False),
    ):
        s = rng.standard_normal((t, e)).astype(np.float32)
        scores = CudaArray.from_numpy(s)
        with tileaot.use_stream(stream.handle):
            idx, weights = tileaot.topk_gate(scores, k, scoring, renormalize)
        assert scores.streams[-1] == stream.handle and idx.streams == [stream.handle]
        assert (idx.dtype, weights.dtype, idx.shape) == ("int32", "float32", (t, k))
        stream.synchronize()
        idx_ref = np.argsort(-s, axis=-1, kind="stable")[:, :k]
        assert np.array_equal(idx.numpy(), idx_ref), f"topk_gate E={e}: indices"
        s64 = s.astype(np.float64)
        if scoring == "softmax":
            p = np.exp(s64 - s64.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
        else:
            p = 1 / (1 + np.exp(-s64))
        w_ref = np.take_along_axis(p, idx_ref, -1)
        if renormalize:
            w_ref /= w_ref.sum(-1, keepdims=True)
        _assert_close(weights.numpy().astype(np.float64), w_ref, 1e-5, 1e-12, f"weights E={e}")


def check_cupy():
    try:
        import cupy
    except ImportError:
        print("SKIP: cupy is not importable")
        return
    import numpy as np
    import tileaot

    rng = np.random.default_rng(5)
    x_h = rng.standard_normal((64, 4096)).astype(np.float32)
    w_h = rng.uniform(0.5, 1.5, 4096).astype(np.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        x, w = cupy.asarray(x_h), cupy.asarray(w_h)
        y = tileaot.rms_norm(x, w, 1e-6)  # on CuPy's current stream: `stream`
        y_h = cupy.asnumpy(y, stream=stream)
    stream.synchronize()
    assert isinstance(y, cupy.ndarray) and y.dtype == cupy.float32 and y.shape == (64, 4096)
    x64 = x_h.astype(np.float64)
    ref = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6) * w_h
    _assert_close(y_h.astype(np.float64), ref, 1e-5, 1e-6, "rms_norm on cupy")
    try:
        tileaot.per_token_cast_fp8(x)
    except TypeError as e:
        assert "pass out=" in str(e), e
    else:
        raise AssertionError("CuPy has no float8: the call must ask for out=")
