"""CPU tests of kernels_py/mhc/sinkhorn_normalize*.py: the references against independent
float64 math (a per-matrix loop; finite differences), a float64 replay of the backward kernel's
algorithm (segments, checkpoints, the per-step formulas) against autograd, the KernelSpec
tables, and lowering smoke tests (skipped without tilelang)."""

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.mhc import sinkhorn_normalize as fwd  # noqa: E402
from kernels_py.mhc import sinkhorn_normalize_backward as bwd  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _loop_sinkhorn(m, repeat, eps):
    """One matrix, plain Python floats: the documented sequence written out by hand."""
    n = len(m)
    p = []
    for row in m:
        mx = max(row)
        e = [pow(2.718281828459045, v - mx) for v in row]
        s = sum(e)
        p.append([v / s + eps for v in e])

    def cols(p):
        c = [sum(p[i][j] for i in range(n)) + eps for j in range(n)]
        return [[p[i][j] / c[j] for j in range(n)] for i in range(n)]

    p = cols(p)
    for _ in range(repeat - 1):
        r = [sum(p[i]) + eps for i in range(n)]
        p = cols([[p[i][j] / r[i] for j in range(n)] for i in range(n)])
    return p


@pytest.mark.parametrize(
    ("n", "repeat", "eps"), [(4, 1, 1e-6), (4, 3, 1e-6), (8, 5, 0.1), (3, 2, 0)]
)
def test_reference_matches_a_hand_written_loop(n, repeat, eps):
    logits = torch.randn(3, n, n) * 3
    got = fwd.reference(logits, repeat, eps)
    assert got.dtype == torch.float32 and got.shape == logits.shape
    for t in range(3):
        want = torch.tensor(_loop_sinkhorn(logits[t].double().tolist(), repeat, eps)).double()
        torch.testing.assert_close(got[t].double(), want, rtol=1e-6, atol=1e-7)


def test_reference_columns_sum_to_one_and_rows_converge():
    logits = torch.randn(64, 4, 4) * 2
    ones = torch.ones(64, 4, dtype=torch.float64)
    deviation = []
    for repeat in (1, 10, 100, 1000):
        p = fwd.reference(logits, repeat=repeat, eps=0.0).double()
        torch.testing.assert_close(p.sum(-2), ones, rtol=0, atol=1e-6)
        deviation.append((p.sum(-1) - 1).abs().max().item())
    assert deviation == sorted(deviation, reverse=True) and deviation[-1] < 1e-5


def test_reference_rejects_repeat_below_one():
    with pytest.raises(ValueError, match="repeat must be >= 1"):
        fwd.reference(torch.randn(2, 4, 4), repeat=0)


def test_backward_reference_matches_finite_differences():
    logits = torch.randn(2, 4, 4, dtype=torch.float64)
    grad_out = torch.randn_like(logits)
    got = bwd.reference(grad_out, logits, repeat=3, eps=1e-3).double()
    h = 1e-6
    for idx in [(0, 0, 0), (0, 1, 3), (1, 2, 2), (1, 3, 0)]:
        d = torch.zeros_like(logits)
        d[idx] = h
        plus = fwd.sinkhorn(logits + d, 3, 1e-3)
        minus = fwd.sinkhorn(logits - d, 3, 1e-3)
        fd = ((plus - minus) * grad_out).sum() / (2 * h)
        assert abs(got[idx].item() - fd.item()) < 1e-6, idx


# --- a float64 replay of the backward kernel's algorithm -------------------------------------


def _col_step(x, eps):
    rc = 1.0 / (x.sum(-2, keepdim=True) + eps)
    return x * rc, rc


def _row_step(x, eps):
    rr = 1.0 / (x.sum(-1, keepdim=True) + eps)
    return x * rr, rr


def _replay_backward(grad_out, logits, repeat, eps, seg):
    """What sinkhorn_normalize_backward computes, step for step, batched over matrices."""
    p0 = torch.softmax(logits, -1)
    g = grad_out
    pairs = repeat - 1
    segments = -(-pairs // seg)
    for sg in range(segments):
        lo = (segments - 1 - sg) * seg
        x = _col_step(p0 + eps, eps)[0]
        for _ in range(lo):  # recompute up to the segment
            x = _col_step(_row_step(x, eps)[0], eps)[0]
        ckpt = {}
        for r in range(seg):  # through it, checkpointing
            if lo + r < pairs:
                ckpt[r] = x
                x = _col_step(_row_step(x, eps)[0], eps)[0]
        for r in reversed(range(seg)):  # and back
            if lo + r < pairs:
                y, rr = _row_step(ckpt[r], eps)
                z, rc = _col_step(y, eps)
                g = (g - (g * z).sum(-2, keepdim=True)) * rc
                g = (g - (g * y).sum(-1, keepdim=True)) * rr
    x1, rc = _col_step(p0 + eps, eps)
    g = (g - (g * x1).sum(-2, keepdim=True)) * rc
    return p0 * (g - (g * p0).sum(-1, keepdim=True))


@pytest.mark.parametrize("n", [4, 8, None])
@pytest.mark.parametrize("pairs_from_seg", [(0, 0), (0, 1), (1, -1), (1, 0), (1, 1), (2, 3)])
def test_backward_algorithm_matches_autograd(n, pairs_from_seg):
    seg = bwd.segment(n)
    k, extra = pairs_from_seg
    repeat = 1 + k * seg + extra
    size = 5 if n is None else n
    logits = torch.randn(16, size, size, dtype=torch.float64) * 2
    grad_out = torch.randn_like(logits)
    x = logits.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(fwd.sinkhorn(x, repeat, 1e-4), x, grad_out)  # float64
    got = _replay_backward(grad_out, logits, repeat, 1e-4, seg)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    # The float32 reference the GPU tests use is this, rounded once.
    torch.testing.assert_close(bwd.reference(grad_out, logits, repeat, 1e-4), want.float())


def test_segments_hold_64_checkpoint_registers():
    assert [bwd.segment(n) for n in (4, 8, None)] == [16, 8, 4]
    assert fwd.lanes(4) == 4 and fwd.lanes(8) == 8 and fwd.lanes(None) == fwd.MAX_N == 16


# --- specs ------------------------------------------------------------------------------------


def test_spec_tables():
    for spec, op in ((fwd.SPEC, "sinkhorn_normalize"), (bwd.SPEC, "sinkhorn_normalize_backward")):
        names = [spec.variant_name(k, s) for k in spec.keys for s in spec.specs]
        assert names == [f"{op}_fp32_any", f"{op}_fp32_n4", f"{op}_fp32_n8"]
        assert [spec.key_string(k) for k in spec.keys] == ["fp32"]
    with pytest.raises(ValueError, match="no static variant for N=16"):
        fwd.factory(arch="sm_90a", dtype="float32", N=16)
    with pytest.raises(ValueError, match="unsupported dtype"):
        bwd.factory(arch="sm_90a", dtype="bfloat16")


# --- lowering smoke tests ---------------------------------------------------------------------


@needs_tilelang
def test_lower_forward_n4_is_registers_shuffles_and_16_byte_rows():
    src = lower_source(fwd.factory(arch="sm_90a", dtype="float32", N=4), "sm_90a", "sk_test")
    assert "__shfl_xor_sync" in src and "__frcp_rn" in src and "expf(" in src
    assert "__expf" not in src and "__shared__" not in src
    assert src.count("*(float4*)(logits + ") == 1 and src.count("*(float4*)(out + ") == 1
    assert "(repeat - 1)" in src  # repeat is a runtime loop


@needs_tilelang
def test_lower_backward_generic_keeps_checkpoints_in_registers():
    src = lower_source(bwd.factory(arch="sm_80", dtype="float32"), "sm_80", "skb_test")
    assert "float ckpt[64];" in src and "__shared__" not in src
