"""CPU tests of mhc_pre_norm_fn (kernels_py/mhc/mhc_pre_norm_fn.py): the reference against an
independent float64 computation and against TileKernels' reference (`tile-kernels` 1.0.0,
``tile_kernels.torch.mhc.mhc_pre_norm_fn_ref``, within its test's ``atol = rtol = 1e-3``), edge
values, and the kernel's lowering for every default arch (TileLang on the CPU, no GPU)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402

from kernels_py.mhc import mhc_pre_norm_fn as norm_fn  # noqa: E402
from kernels_py.spec import DEFAULT_ARCHS  # noqa: E402

BF16, F32 = torch.bfloat16, torch.float32
TOKENS = (0, 1, 7, 129, 4001)
BOUND = {"atol": 1e-3, "rtol": 1e-3}  # TileKernels' tests/mhc/test_norm_fn.py


def _inputs(tokens: int, r: int = 4, h: int = 64, scale: float = 1.0):
    """TileKernels' test data (per-stream scales, fn ~ 1e-4), at small sizes."""
    n = r * (2 + r)
    streams = 1 + 0.01 * torch.arange(r).view(1, -1, 1)
    residual = (torch.randn(tokens, r, h) * streams * scale).to(BF16)
    fn = (torch.randn(n, r, h) * 1e-4 * streams).flatten(1)
    return residual, fn


def _float64(residual, fn, eps):
    """The documented formula, token by token, in float64 (no matmul, no shared code)."""
    x = residual.double().flatten(1)
    f = fn.double()
    out = torch.empty(x.shape[0], f.shape[0], dtype=torch.float64)
    for t in range(x.shape[0]):
        rms = 1.0 / math.sqrt(float((x[t] * x[t]).sum()) / x.shape[1] + eps)
        out[t] = (f * x[t]).sum(-1) * rms
    return out


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("tokens", TOKENS)
def test_reference_against_float64_and_tile_kernels(tokens):
    residual, fn = _inputs(tokens, h=16 if tokens > 1000 else 96)
    got = norm_fn.reference(residual, fn, 1e-6)
    assert got.shape == (tokens, fn.shape[0]) and got.dtype == F32
    torch.testing.assert_close(got.double(), _float64(residual, fn, 1e-6), rtol=1e-5, atol=1e-7)
    if tokens:  # TileKernels' reference cannot view 0 tokens back ([1, 0, -1] is ambiguous)
        want = tk("mhc").mhc_pre_norm_fn_ref(residual.unsqueeze(0), fn, None, 1e-6)[0]
        torch.testing.assert_close(got, want, **BOUND)


@pytest.mark.parametrize(("r", "h"), [(4, 1280), (4, 7168), (8, 512), (1, 40)])
def test_reference_matches_tile_kernels_with_a_norm_weight(r, h):
    residual, fn = _inputs(7, r, h)
    w = torch.randn(r * h) * 0.1 + 1.0
    got = norm_fn.reference(residual, fn * w, 1e-6)
    want = tk("mhc").mhc_pre_norm_fn_ref(residual.unsqueeze(0), fn, w, 1e-6)[0]
    torch.testing.assert_close(got, want, **BOUND)
    # the kernel's layout: mhc_fn by stream, [N, R, H]
    torch.testing.assert_close(norm_fn.reference(residual, (fn * w).view(-1, r, h), 1e-6), got)


def test_edge_values():
    residual, fn = _inputs(6, h=32)
    residual[0] = 0  # zero row: 0 * rsqrt(eps), no NaN
    residual[1] = -0.0
    residual[2] *= 2.0**56  # huge: the float32 sum of squares (2**119 here) still fits
    residual[3] *= 2.0**-100  # tiny: the squares underflow to 0 and eps is the norm
    residual[4, 0, 0] = float("-inf")
    residual[5, 1, 3] = float("nan")
    got = norm_fn.reference(residual, fn, 1e-6)
    assert torch.equal(got[:2], torch.zeros(2, fn.shape[0]))
    torch.testing.assert_close(got[2:4].double(), _float64(residual[2:4], fn, 1e-6), rtol=1e-5,
                               atol=1e-30)  # fmt: skip
    assert got[4:].isnan().all()  # inf / inf and NaN propagate, as in TileKernels' reference
    want = tk("mhc").mhc_pre_norm_fn_ref(residual.unsqueeze(0), fn, None, 1e-6)[0]
    torch.testing.assert_close(got, want, equal_nan=True, **BOUND)


def test_ties_and_eps_zero():
    """Equal streams give equal mixes; eps = 0 is the plain RMS (a constant row: rms = |c|)."""
    residual = torch.full((2, 4, 8), 0.5).to(BF16)
    fn = torch.ones(24, 32)
    got = norm_fn.reference(residual, fn, 0.0)
    assert torch.equal(got, torch.full((2, 24), 32.0))  # 32 * 0.5 / 0.5


def test_no_values_per_token():
    """K = 0: the mean square is 0 / 0 (our reference: NaN); TileKernels' reference cannot
    view the empty rows at all, so the wrapper refuses K = 0 (test_python_api_mhc_pre_norm_fn)."""
    residual, fn = torch.zeros(3, 4, 0, dtype=BF16), torch.zeros(24, 0)
    assert norm_fn.reference(residual, fn, 1e-6).isnan().all()
    with pytest.raises(RuntimeError):
        tk("mhc").mhc_pre_norm_fn_ref(residual.unsqueeze(0), fn, None, 1e-6)


def test_static_n_out_of_range_is_refused():
    assert {"N": 24} in norm_fn.SPEC.specs and {} in norm_fn.SPEC.specs
    assert norm_fn.SPEC.spec_error({"dtype": "bfloat16"}, {"N": 24}) is None
    message = norm_fn.SPEC.spec_error({"dtype": "bfloat16"}, {"N": 33})
    assert message and "1 <= N <= 32" in message
    with pytest.raises(ValueError, match="out of range"):
        norm_fn.factory(arch="sm_90a", dtype="bfloat16", N=0)


@needs_tilelang
@pytest.mark.parametrize("arch", DEFAULT_ARCHS)
def test_lower_generic_for_every_default_arch(arch):
    src = lower_source(norm_fn.factory(arch=arch, dtype="bfloat16"), arch, "norm_fn_test")
    assert "(H % 8) == 0" in src  # the runtime branch between vector and element accesses
    assert "__shfl_xor_sync" in src or "shfl_xor" in src
    assert src.count("__global__ void __launch_bounds__") == 2  # mul, norm
    assert "atomic" not in src.lower()  # every sum in a fixed order
    assert "+ 4096) & -8192" in src  # mhc_fn rounded to TF32 as TileKernels' round_to_tf32
    # TF32 tensor cores from sm_80 on (mma.sync, not wgmma or tcgen05); TileLang's CUDA-core
    # loop over the same tiles before (Volta and Turing have no TF32 MMA).
    tensor_cores = arch not in ("sm_70", "sm_75")
    assert ("mma_sync<tl::DataType::kTensorFloat32" in src) == tensor_cores
    assert "wgmma" not in src and "tcgen05" not in src


@needs_tilelang
@pytest.mark.parametrize("n", [None, 24])
def test_rows_are_read_16_bytes_at_a_time(n):
    """x as one 16-byte load per token and chunk, mhc_fn as two (no 32-byte access: sm_100a)."""
    spec = {} if n is None else {"N": n}
    src = lower_source(norm_fn.factory(arch="sm_90a", dtype="bfloat16", **spec), "sm_90a", "t")
    assert "*(uint4*)(residual + " in src
    assert "*(float4*)(mhc_fn + " in src
    assert "ulonglong4" not in src and "longlong4" not in src
