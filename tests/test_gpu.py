"""GPU tests: every op × dtype × variant built for this GPU against its torch reference.

Fresh random inputs (never zeros), sizes that are not tile multiples, outputs poisoned before
each call (NaN for floats, 0xFF bytes — an e4m3 NaN — for fp8) so an unwritten element fails.
fp8 bytes and scales must be bit-exact; rms_norm and gemm within the stated tolerances.
Each test also checks which variant served it, and the last test checks that together they
exercised every variant this build has for the device.
"""

from __future__ import annotations

import importlib

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

SEEN: set[str] = set()  # variant names exercised by the tests below

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# Output tolerance against the float32 reference rounded to the output dtype: one rounding
# of the output (ulp of bf16 is 2^-8 relative) plus float32 reduction-order differences.
RMS_TOL = {"bf16": (1.6e-2, 1e-2), "fp16": (2e-3, 1e-3), "fp32": (1e-5, 1e-5)}


def _reference(module: str):
    return importlib.import_module(f"kernels_py.{module}").reference


def _select(op: str, key: str, shapes: list[tuple[int, ...]]) -> str:
    """Name of the variant the runtime picks for these shapes on device 0."""
    from tileaot import _lib

    native = _lib.native()
    flat = tuple(d for s in shapes for d in s)
    return native.select(native.lookup(op, key), 0, flat)


def _randn(shape, dtype, scale=1.0):
    x = torch.randn(shape, dtype=torch.float32, device="cuda") * scale
    return x.to(dtype)


# ---------------------------------------------------------------- rms_norm
def _rms_sizes() -> tuple[int, ...]:
    kernel = importlib.import_module("kernels_py.norm.rms_norm")
    return kernel.STATIC_N + kernel.ZOO_N


RMS_SHAPES = [
    (1, 2048),
    (37, 4096),
    (129, 7168),
    (3, 8192),
    (37, 1000),
    (5, 4100),
    (1024, 129),
    (2, 7),
    (300, 4096),
    (33, 2880),  # static, padded row (no power-of-two thread count divides it)
    (4099, 128),  # static q/k-norm head dim, padded
    (9, 5120),
]
# Every specialised size gets a case, so a size added to the kernel's lists is tested here too.
RMS_SHAPES += [(7, n) for n in sorted(set(_rms_sizes())) if n not in {n_ for _, n_ in RMS_SHAPES}]


@pytest.mark.parametrize("key", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("m,n", RMS_SHAPES)
def test_rms_norm(key, m, n):
    import tileaot

    dtype = DTYPES[key]
    x = _randn((m, n), dtype, 3.0)
    w = _randn((n,), dtype)
    y = torch.full_like(x, float("nan"))
    name = _select("rms_norm", key, [(m, n), (n,), (m, n)])
    SEEN.add(name)
    out = tileaot.rms_norm(x, w, 1e-5, out=y)
    torch.cuda.synchronize()
    assert out is y
    ref = _reference("norm.rms_norm")(x, w, 1e-5)
    rtol, atol = RMS_TOL[key]
    torch.testing.assert_close(y, ref, rtol=rtol, atol=atol, msg=lambda m_: f"{name}: {m_}")


# ---------------------------------------------------------------- per_token_cast_fp8
CAST_SHAPES = [
    (1, 4096, 128),
    (37, 7168, 128),
    (513, 256, 128),
    (3, 1152, 128),
    (37, 4096, None),
    (19, 1000, None),
    (5, 7, None),
    (262_147, 128, 128),
    (4_194_247, 128, 128),  # more 64-row tiles than gridDim.y takes: two launches
    (37, 7168, 32),
    (513, 96, 32),  # N not a multiple of 128: 3 groups of 32
    (1, 4096, 64),
    (1025, 320, 64),  # 5 groups; row tiles of 128 rows, the last partial
    (4_194_247, 64, 32),  # past the 65535 * 64 rows of one launch: two launches
]


@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("key", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("m,n,group", CAST_SHAPES)
def test_per_token_cast_fp8(key, m, n, group, round_sf):
    """TileKernels' per_token_cast (x * RN(448 / amax); round_sf: power-of-two scales) bit for
    bit against the reference (tests/test_parity_quant.py holds that to TileKernels')."""
    import tileaot

    dtype = DTYPES[key]
    x = _randn((m, n), dtype, 10.0)
    x[0, : min(n, 256)] = 0  # a zero group (a zero row when n <= 256) must not give NaN
    x[-1, -1] = 1e4 if key != "fp16" else 6e4  # a large value saturates correctly
    # Signed zeros and tiny values next to a large one: products that are ±0 in e4m3, whose
    # sign the cast must keep.
    big = 1e4 if key != "fp16" else 6e4
    x[-1, :6] = torch.tensor([-0.0, 1e-38, -1e-38, 1e-30, -1e-30, big], dtype=dtype)
    cols = n // group if group else 1
    q = torch.full((m, n), 0xFF, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    scale = torch.full((m, cols), float("nan"), device="cuda")
    mode = f"g{group}" if group else "token"
    name = _select("per_token_cast_fp8", f"{key},{mode}", [(m, n), (m, n), (m, cols)])
    SEEN.add(name)
    tileaot.per_token_cast_fp8(x, group, round_sf=round_sf, out=(q, scale))
    torch.cuda.synchronize()
    q_ref, scale_ref = _reference("quant.per_token_cast_fp8")(x, group or n, round_sf)
    assert torch.equal(scale, scale_ref.reshape(m, cols)), f"{name}: scales differ"
    mismatch = (q.view(torch.uint8) != q_ref.view(torch.uint8)).sum().item()
    assert mismatch == 0, f"{name}: {mismatch} fp8 bytes differ"
    assert not torch.isnan(q.float()).any()


# ---------------------------------------------------------------- gemm
GEMM_SHAPES = [
    (1, 4096, 4096),
    (77, 4096, 4096),
    (1024, 7168, 2048),
    (129, 264, 136),
    (256, 1024, 512),
    (65, 14336, 4096),
    (3, 8, 8),
]


@pytest.mark.parametrize("key", ["bf16", "fp16"])
@pytest.mark.parametrize("m,n,k", GEMM_SHAPES)
def test_gemm(key, m, n, k):
    import tileaot

    dtype = DTYPES[key]
    a = _randn((m, k), dtype)
    b = _randn((n, k), dtype)
    c = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
    name = _select("gemm", key, [(m, k), (n, k), (m, n)])
    SEEN.add(name)
    tileaot.gemm(a, b, out=c)
    torch.cuda.synchronize()
    ref = _reference("gemm.gemm")(a, b).float()
    # fp32 accumulation in a different order: relative Frobenius error well under 1 %.
    err = ((c.float() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, f"{name}: relative error {err:.2e}"
    assert not torch.isnan(c).any(), f"{name}: unwritten outputs"


# ---------------------------------------------------------------- the DLPack fast path
def test_native_call_takes_tensors_and_checks_them():
    """_C.call reads tensors through the DLPack C exchange API: same result as the op, and
    the checks (dtype against the key, device, layout) raise before any launch."""
    from tileaot import _lib

    native = _lib.native()
    x, w = _randn((37, 4096), torch.bfloat16), _randn((4096,), torch.bfloat16)
    y = torch.full_like(x, float("nan"))
    handle = native.lookup("rms_norm", "bf16")
    assert native.call(handle, (x, w, y), (1e-5,)) is True
    torch.cuda.synchronize()
    torch.testing.assert_close(y, _reference("norm.rms_norm")(x, w, 1e-5), rtol=1.6e-2, atol=1e-2)
    with pytest.raises(TypeError, match="weight has dtype float32"):
        native.call(handle, (x, w.float(), y), (1e-5,))
    with pytest.raises(ValueError, match="not contiguous"):
        native.call(handle, (x[:, ::2], w[::2], y[:, ::2]), (1e-5,))
    with pytest.raises(ValueError, match="CUDA memory"):
        native.call(handle, (x.cpu(), w, y), (1e-5,))
    with pytest.raises(ValueError, match="weight has 2 dims .*takes 1"):
        native.call(handle, (x, w[None], y.view(-1)), (1e-5,))  # 5 dims in all, wrong ranks
    with pytest.raises(ValueError, match="output y overlaps x"):
        native.call(handle, (x, w, x), (1e-5,), 0b100)
    native.call(handle, (x, w, x), (1e-5,), 0)  # in place is the caller's call without the bit
    assert native.call(handle, (x[:0], w, y[:0]), (1e-5,)) is False  # empty: nothing launched
    q = torch.empty(37, 4096, dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty(37, 32, device="cuda")
    cast = native.lookup("per_token_cast_fp8", "bf16,g128")
    for round_sf in (0.0, 1.0):  # the kernel's one scalar
        native.call(cast, (x, q, s), (round_sf,))
        torch.cuda.synchronize()
        q_ref, s_ref = _reference("quant.per_token_cast_fp8")(x, 128, bool(round_sf))
        assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))
        assert torch.equal(s, s_ref)
    with pytest.raises(ValueError, match="scalars"):
        native.call(cast, (x, q, s), ())


# ---------------------------------------------------------------- streams and coverage
def test_launch_is_ordered_on_the_callers_stream():
    """Input written on a side stream after a long sleep: a launch on any other stream would
    read the poisoned input and fail."""
    import tileaot

    x_src = _randn((256, 4096), torch.bfloat16)
    w = _randn((4096,), torch.bfloat16)
    want = _reference("norm.rms_norm")(x_src, w, 1e-6)
    assert_ordered_on_callers_stream(
        lambda x: tileaot.rms_norm(x, w, 1e-6, out=torch.full_like(x, float("nan"))),
        lambda y: torch.testing.assert_close(y, want, rtol=1.6e-2, atol=1e-2),
        x_src,
    )


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised(("rms_norm", "gemm", "per_token_cast_fp8"), SEEN)


def test_ops_take_the_short_path_after_a_checked_call(monkeypatch):
    """The second call of an op goes through `_C.call` alone (the checked path's `native()` is
    made to fail), computes the same result, and still refuses bad arguments with the
    checked path's messages."""
    import tileaot
    from tileaot import _lib

    x, w = _randn((37, 4096), torch.bfloat16), _randn((4096,), torch.bfloat16)
    first = tileaot.rms_norm(x, w, 1e-5)
    q_ref, s_ref = tileaot.per_token_cast_fp8(x)
    assert ("rms_norm", torch.bfloat16) in _lib._fast

    def no_checked_path():
        raise AssertionError("took the checked path")

    with monkeypatch.context() as m:
        m.setattr(_lib, "native", no_checked_path)
        y = torch.full_like(x, float("nan"))
        assert tileaot.rms_norm(x, w, 1e-5, out=y) is y
        q, s = tileaot.per_token_cast_fp8(x)
        torch.cuda.synchronize()
    assert torch.equal(y, first)
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(s, s_ref)
    with pytest.raises(ValueError, match="overlap"):
        tileaot.rms_norm(x, w, 1e-5, out=x)
    with pytest.raises(TypeError, match="weight"):
        tileaot.rms_norm(x, w.float(), 1e-5)
    with pytest.raises(ValueError, match="weight must have shape"):
        tileaot.rms_norm(x, w[:2048].contiguous(), 1e-5)


def _short_path_calls() -> dict:
    """Op case -> a call of it on CUDA inputs made once here (the same inputs at every call)."""
    import tileaot

    x = _randn((37, 512), torch.bfloat16, 3.0)
    w = torch.rand(37, device="cuda")
    q8, s8 = tileaot.per_token_cast_fp8(x)
    qb, sb = tileaot.per_block_cast_fp8(x)
    ys = _randn((20, 64), torch.bfloat16)
    pos = torch.randint(-1, 20, (6, 2), dtype=torch.int32, device="cuda")
    probs = torch.rand(6, 2, device="cuda")
    h, k, v = (_randn((4, 64), torch.bfloat16) for _ in range(3))
    g_w = torch.nn.Parameter(_randn((64,), torch.bfloat16), requires_grad=False)
    return {
        "swiglu_per_token_cast_fp8": lambda: tileaot.swiglu_per_token_cast_fp8(x, w, 7.0),
        "per_block_cast_fp8": lambda: tileaot.per_block_cast_fp8(x),
        "per_token_cast_fp4": lambda: tileaot.per_token_cast_fp4(x, 16, "e4m3"),
        "cast_back/g128": lambda: tileaot.cast_back(q8, s8),
        "cast_back/block128": lambda: tileaot.cast_back(qb, sb, out_dtype=torch.float32),
        "moe_reduce": lambda: tileaot.moe_reduce(ys, pos, probs),
        "transpose": lambda: tileaot.transpose(x.view(37, 8, 64)),
        "engram_gate": lambda: tileaot.engram_gate(h, k, v, g_w, g_w, return_gate=True),
    }


def _bits(result) -> list:
    """The result's tensors, 1-byte ones as uint8 (torch.equal has no float8 kernels)."""
    tensors = result if isinstance(result, tuple) else (result,)
    return [r.view(torch.uint8) if r.element_size() == 1 else r for r in tensors]


@pytest.mark.parametrize(
    "case",
    [
        "swiglu_per_token_cast_fp8",
        "per_block_cast_fp8",
        "per_token_cast_fp4",
        "cast_back/g128",
        "cast_back/block128",
        "moe_reduce",
        "transpose",
        "engram_gate",
    ],
)
def test_short_path_of_each_op_computes_what_the_checked_path_did(monkeypatch, case):
    """A first call on the checked path teaches the short path; a second (`native()` made to
    fail, so only `_C.call` can launch) must give the same bits."""
    from tileaot import _lib

    call = _short_path_calls()[case]
    monkeypatch.setattr(_lib, "_fast", {})  # nothing learned yet: the first call is checked
    first = call()

    def no_checked_path():
        raise AssertionError("took the checked path")

    with monkeypatch.context() as m:
        m.setattr(_lib, "native", no_checked_path)
        second = call()
        torch.cuda.synchronize()
    for a, b in zip(_bits(first), _bits(second), strict=True):
        assert a.data_ptr() != b.data_ptr() and torch.equal(a, b), case


def test_gemm_short_path_with_a_parameter_weight(monkeypatch):
    """An nn.Linear weight (nn.Parameter) goes through `_C.call` too: same bits as the
    checked path's first call."""
    import tileaot
    from tileaot import _lib

    a = _randn((33, 512), torch.bfloat16)
    b = torch.nn.Parameter(_randn((256, 512), torch.bfloat16), requires_grad=False)
    first = tileaot.gemm(a, b)

    def no_checked_path():
        raise AssertionError("took the checked path")

    with monkeypatch.context() as m:
        m.setattr(_lib, "native", no_checked_path)
        c = torch.full_like(first, float("nan"))
        assert tileaot.gemm(a, b, out=c) is c
        torch.cuda.synchronize()
    assert torch.equal(c, first)
