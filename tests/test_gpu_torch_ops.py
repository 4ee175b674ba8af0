"""GPU tests of the torch custom ops (``torch.ops.tileaot.*``, `tileaot.torch_ops`).

* ``torch.library.opcheck`` (every test it has: schema, autograd registration, fake tensors,
  AOT dispatch static and dynamic, gradients included for the differentiable ops) for every op
  at small shapes. Inputs are chosen so that every output element is written (moe_expand with
  ``alignment=1`` and no dropped slot): opcheck compares whole outputs of separate calls.
* Each functional op and its ``_out`` variant equal the wrapper bit for bit.
* A small MoE-style block (rms_norm, gemm, topk_gate, moe_expand, swiglu, per_token_cast_fp8,
  cast_back, moe_reduce) under ``torch.compile(fullgraph=True)`` (inductor),
  ``torch.compile(mode="reduce-overhead")`` and a hand-made CUDA graph equals eager bit for bit
  (the ops are deterministic and the torch glue is exact); a graph replayed after new values
  are copied into its inputs equals eager on the new values.
* The same block written with the public functions (``tileaot.rms_norm(..., out=buf)`` etc.)
  compiles with ``fullgraph=True`` and equals eager bit for bit, ``buf`` included.
* Compiled forward and backward of sinkhorn_normalize and engram_gate equal the eager
  wrappers' autograd bit for bit (same kernels on the same inputs).
"""

from __future__ import annotations

import functools
import importlib

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from _torch_ops_helpers import block, wrapper_block, wrapper_call  # noqa: E402

BF16, F32, FP8 = torch.bfloat16, torch.float32, torch.float8_e4m3fn


@pytest.fixture(scope="module", autouse=True)
def _registered():
    importlib.import_module("tileaot").register_torch_ops()


def _randn(*shape: int, dtype: torch.dtype = BF16, grad: bool = False) -> torch.Tensor:
    return torch.randn(shape, device="cuda").to(dtype).requires_grad_(grad)


def _idx(rows: int, cols: int, high: int) -> torch.Tensor:
    return torch.randint(0, high, (rows, cols), dtype=torch.int32, device="cuda")


def _fp8(*shape: int) -> torch.Tensor:
    return _randn(*shape, dtype=F32).to(FP8)


def _u8(*shape: int) -> torch.Tensor:
    return torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda")


def _engram(rows: tuple[int, ...], h: int, dtype=BF16, grad=False) -> tuple[torch.Tensor, ...]:
    return (
        *(_randn(*rows, h, dtype=dtype, grad=grad) for _ in range(3)),
        *(_randn(h, dtype=dtype, grad=grad) for _ in range(2)),
    )


# (op, arguments): valid on the GPU, every output element written.
CASES = [
    ("rms_norm", lambda: (_randn(33, 256), _randn(256))),
    ("gemm", lambda: (_randn(64, 128), _randn(96, 128))),
    ("per_token_cast_fp8", lambda: (_randn(16, 256),)),
    ("per_token_cast_fp8", lambda: (_randn(16, 200), None)),
    ("per_token_cast_fp4", lambda: (_randn(16, 128),)),
    ("per_token_cast_fp4", lambda: (_randn(8, 64, dtype=F32), 16, "e4m3")),
    ("per_block_cast_fp8", lambda: (_randn(130, 256),)),
    ("cast_back", lambda: (_fp8(16, 256), _randn(16, 2, dtype=F32).abs())),
    ("cast_back", lambda: (_fp8(130, 256), _randn(2, 2, dtype=F32).abs(), "block128", None, F32)),
    ("cast_back", lambda: (_u8(16, 64), _u8(16, 4).clamp(120, 134), None, 32)),  # UE8M0 2^±7
    ("topk_gate", lambda: (_randn(32, 64, dtype=F32), 4)),
    ("topk_gate", lambda: (_randn(32, 300, dtype=F32), 8, "sigmoid", False)),
    ("swiglu", lambda: (_randn(16, 512),)),
    ("swiglu_per_token_cast_fp8", lambda: (_randn(16, 512), _randn(16, dtype=F32), 7.0)),
    ("transpose", lambda: (_randn(64, 48),)),
    ("sinkhorn_normalize", lambda: (_randn(64, 4, 4, dtype=F32, grad=True), 5)),
    ("sinkhorn_normalize", lambda: (_randn(8, 5, 5, dtype=F32, grad=True), 3, 1e-4)),
    ("sinkhorn_normalize_backward", lambda: (*(_randn(64, 4, 4, dtype=F32) for _ in "gl"), 5)),
    ("moe_expand", lambda: (_randn(32, 256), _idx(32, 2, 8), 8, 1)),
    ("moe_expand", lambda: (_fp8(32, 256), _idx(32, 2, 8), 8, 1, _randn(32, 2, dtype=F32).abs())),
    ("moe_reduce", lambda: (_randn(64, 256), _idx(32, 2, 64), _randn(32, 2, dtype=F32))),
    ("moe_reduce", lambda: (_randn(64, 256, dtype=F32), _idx(32, 2, 64), None, BF16)),
    ("engram_gate", lambda: _engram((8, 4), 256, grad=True)),
    ("engram_gate", lambda: (*_engram((6,), 100, dtype=F32, grad=True), 1e-5)),
    ("engram_gate_backward", lambda: (_randn(8, 4, 256), *_engram((8, 4), 256))),
]  # fmt: skip
CASE_IDS = [f"{op}-{i}" for i, (op, _) in enumerate(CASES)]


def _op(name: str):
    return getattr(torch.ops.tileaot, name)


def _as_list(result) -> list:
    return [result] if isinstance(result, torch.Tensor) else list(result)


def _assert_same(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        if e is None:
            assert g is None
            continue
        assert (g.shape, g.dtype) == (e.shape, e.dtype)
        assert torch.equal(g.view(torch.uint8), e.view(torch.uint8))  # bits (NaNs, fp8)


@pytest.mark.parametrize(("op", "make"), CASES, ids=CASE_IDS)
def test_opcheck(op, make):
    args = make()
    kwargs = {}
    if any(isinstance(a, torch.Tensor) and a.dtype == FP8 for a in args):
        # test_schema compares inputs before/after with allclose, which has no fp8 kernel.
        kwargs["test_utils"] = (
            "test_autograd_registration",
            "test_faketensor",
            "test_aot_dispatch_static",
            "test_aot_dispatch_dynamic",
        )
    torch.library.opcheck(_op(op), args, **kwargs)


@pytest.mark.parametrize(("op", "make"), CASES, ids=CASE_IDS)
def test_op_and_out_variant_equal_the_wrapper(op, make):
    args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in make())
    expected = _as_list(wrapper_call(op, args))
    _assert_same(_as_list(_op(op)(*args)), expected)
    outs = [None if e is None else torch.full_like(e.view(torch.uint8), 0xFF).view(e.dtype)
            for e in expected]  # fmt: skip
    _op(f"{op}_out")(*outs, *args)
    _assert_same(outs, expected)


def _block_inputs(m: int = 64, h: int = 256, experts: int = 16, inner: int = 256):
    scale = h**-0.5
    return (
        _randn(m, h),
        _randn(h),
        _randn(experts, h) * scale,
        _randn(2 * inner, h) * scale,
        _randn(h, inner) * inner**-0.5,
    )


def _assert_block_equal(got, expected) -> None:
    (out, offsets), (ref, ref_offsets) = got, expected
    assert torch.equal(offsets, ref_offsets)
    assert torch.isfinite(ref.float()).all()
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_equals_eager(dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, dynamic=dynamic)
    for m in (64, 40) if dynamic else (64,):
        inputs = _block_inputs(m)
        _assert_block_equal(compiled(*inputs), block(*inputs))


def test_compiled_public_functions_equal_eager():
    """Model code calling tileaot.<op> (with out=, keywords, return_gate) compiles fullgraph."""
    torch._dynamo.reset()
    compiled = torch.compile(wrapper_block, fullgraph=True)
    inputs = _block_inputs()
    buf, ref_buf = torch.empty_like(inputs[0]), torch.empty_like(inputs[0])
    got, expected = compiled(*inputs, buf), wrapper_block(*inputs, ref_buf)
    _assert_same([*got, buf], [*expected, ref_buf])
    assert torch.isfinite(expected[0].float()).all()


def test_cuda_graph_replay_equals_eager():
    static = _block_inputs()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up: handles looked up, cubins loaded before capture
        for _ in range(2):
            block(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = block(*static)
    for _ in range(2):  # the second round reads new values from the same input tensors
        graph.replay()
        torch.cuda.synchronize()
        _assert_block_equal(captured, block(*static))
        for dst, src in zip(static, _block_inputs(), strict=True):
            dst.copy_(src)


def test_compile_reduce_overhead_equals_eager():
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    compiled = torch.compile(block, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):  # warm-up, recording, then replays of the CUDA graph
        inputs = _block_inputs()
        got = [t.clone() for t in compiled(*inputs)]
        _assert_block_equal(got, block(*inputs))
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


def test_compiled_autograd_equals_eager_wrappers():
    tileaot = importlib.import_module("tileaot")

    def loss(ops, logits, c_p, h, k, v, w_h, w_k, c_out):
        p = ops.sinkhorn_normalize(logits, 7, 1e-6)
        out = ops.engram_gate(h, k, v, w_h, w_k, 1e-6)
        out = out[0] if isinstance(out, tuple) else out
        return (p * c_p).sum() + (out.float() * c_out).sum()

    logits = _randn(256, 4, 4, dtype=F32)
    tensors = _engram((16, 4), 256)
    consts = _randn(256, 4, 4, dtype=F32), _randn(16, 4, 256, dtype=F32)

    def grads(fn):
        leaves = [t.detach().clone().requires_grad_() for t in (logits, *tensors)]
        value = fn(leaves[0], consts[0], *leaves[1:], consts[1])
        value.backward()
        return value.detach(), [t.grad for t in leaves]

    value, expected = grads(lambda *a: loss(tileaot, *a))  # the wrappers' autograd.Functions
    for ops, compiled in ((torch.ops.tileaot, True), (tileaot, True), (torch.ops.tileaot, False)):
        torch._dynamo.reset()
        fn = functools.partial(loss, ops)
        got_value, got = grads(torch.compile(fn, fullgraph=True) if compiled else fn)
        _assert_same(got, expected)  # the gradients of sums are exact: same kernels, same inputs
        torch.testing.assert_close(got_value, value)  # inductor may sum in another order
