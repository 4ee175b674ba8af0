"""GPU tests of engram_gate and engram_gate_backward against float64 torch math.

TileKernels' semantics (per-branch weights ``[G, H]``, ``clamp_value``); the last tests also
compare with TileKernels' reference itself on the GPU, within its tests' bounds.

Every key (bf16, fp32) x every variant: the static H (2048, 4096, 7168, with 1 to ~4 rows per
backward block) and generic H (1000 and 4100: 16-byte vector path for fp32 / bf16 as they
divide; 7 and 129: the scalar path), 2-D and 3-D ([T, G, H]) inputs, and v shared by the G
rows of a token ([T, 1, H]). Inputs are random, never
zeros; rows whose scaled dot |s| < 0.25 are redrawn (the gate's slope there is ~1/sqrt|s| and
amplifies float32 rounding; s = 0 has a test of its own). Outputs are poisoned with NaN before
each call, so an unwritten element fails.

Tolerances: forward `out` within 1.6e-2 relative / 1e-2 absolute (bf16: one output rounding)
and 1e-5 / 1e-5 (fp32) of the float64 result; the gate within 1e-5 relative. Gradients against
float64 autograd of the float64 forward: normwise relative error per gradient below 1e-2
(bf16) / 1e-5 (fp32), and elementwise within 10x that relative to the gradient's largest
element. Each test checks which variant served it; the last test checks that every
engram_gate(_backward) variant built for this GPU was exercised.

Under compute-sanitizer (``TILEAOT_SANITIZE=1``, exported by scripts/sanitize.sh) the shapes
are cut to at most ``SANITIZE_ELEMENTS`` elements (see ``sized``); the full sizes otherwise.
"""

from __future__ import annotations

import importlib
import math
import os

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream, selected

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OPS = ("engram_gate", "engram_gate_save", "engram_gate_backward")
SEEN: set[str] = set()
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
OUT_TOL = {"bf16": (1.6e-2, 1e-2), "fp32": (1e-5, 1e-5)}
GRAD_TOL = {"bf16": 1e-2, "fp32": 1e-5}
EPS = 1e-6
# Under the sanitizer every tensor is its own cudaMalloc and several sanitized processes share
# the GPU: at the full sizes (up to 115 M elements per tensor, float64 references of ~1 GiB
# each) 32 tests ran out of memory on an H200 (2026-12-02), which left them inconclusive.
SANITIZE = os.environ.get("TILEAOT_SANITIZE") == "1"
SANITIZE_ELEMENTS = 1 << 22


def sized(shape: tuple[int, ...]) -> tuple[int, ...]:
    """`shape`, or under the sanitizer its leading (token) dim cut, odd, to at most about
    SANITIZE_ELEMENTS elements. The row length and branch count stay, so every variant is
    still served; backward blocks still own several rows where the full shape has them (a
    4M-element shape has more rows than an H200's blocks for every H here)."""
    if not SANITIZE:
        return shape
    tokens = min(shape[0], SANITIZE_ELEMENTS // math.prod(shape[1:]) | 1)
    return (tokens, *shape[1:])


SHAPES = [  # input shape; rows = all but the last dim, H = the last
    (37, 2048),
    (1600, 2048),  # > SMs * 4 rows: backward blocks own several rows
    (3, 4, 4096),
    (700, 4096),
    (1, 7168),
    (129, 7168),
    (1200, 4, 7168),
    (5, 1000),
    (2000, 1000),
    (33, 4100),
    (7, 7),
    (2, 3, 129),
]
SHAPES = [sized(s) for s in SHAPES]


def _reference_module():
    return importlib.import_module("kernels_py.engram.engram_gate")


def _blocks(key: str, rows: int, n: int, w_rows: int = 1) -> int:
    """The backward's block count, as the wrapper computes it."""
    mod = importlib.import_module("tileaot.engram_gate_backward")
    per_sm = mod._BLOCKS_PER_SM.get((key, n), mod._GENERIC_BLOCKS_PER_SM)
    blocks = min(rows, mod._sm_count(0) * per_sm)
    return blocks - blocks % w_rows


def _scaled_dot(h, k, w_h, w_k):
    n = h.shape[-1]
    # The weight multiplies after the norm: torch's rms_norm takes only an (n,) weight, and the
    # per-branch weights are [hc, n] (broadcast over the tokens).
    a = torch.nn.functional.rms_norm(h.double(), (n,), None, EPS) * w_h.double()
    b = torch.nn.functional.rms_norm(k.double(), (n,), None, EPS) * w_k.double()
    return (a * b).sum(-1) / math.sqrt(n)


def _inputs(shape, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    n = shape[-1]

    def randn(*s):
        return torch.randn(s, device="cuda", generator=g)

    h, k, v = (randn(*shape).to(dtype) for _ in range(3))
    w_h, w_k = ((1 + 0.3 * randn(n)).to(dtype) for _ in range(2))
    for _ in range(100):  # redraw k where |s| is small (the gate slope is ~ 1/sqrt|s|)
        small = _scaled_dot(h, k, w_h, w_k).abs() < 0.25
        if not small.any():
            break
        k[small] = randn(int(small.sum()), n).to(dtype)
    return h, k, v, w_h, w_k


def _forward64(h, k, v, w_h, w_k):
    """(out, g) in float64; differentiable."""
    return _reference_module().reference(h, k, v, w_h, w_k, EPS)


def _grads64(go, *inputs, dtype=torch.float64):
    leaves = [x.to(dtype).requires_grad_() for x in inputs]
    out, _ = _forward64(*leaves)
    return torch.autograd.grad(out, leaves, go.to(dtype))


def _grad_buffers(h, v, w_h, w_k):
    """NaN-poisoned out= for the backward: grads in h's dtype, weight grads float32."""
    grads = tuple(torch.full_like(x, float("nan")) for x in (h, h, v))
    wgrads = tuple(torch.full_like(w, float("nan"), dtype=torch.float32) for w in (w_h, w_k))
    return grads + wgrads


def _saved64(h, k, v, w_h, w_k, clamp=1e-6):
    """The forward's (dot, g, rstd_h, rstd_k) in float64 (the backward reference's input)."""
    x = (t.double() for t in (h, k, v, w_h, w_k))
    return _reference_module().statistics(*x, EPS, clamp)[1:]


def _normwise(got, want) -> float:
    return ((got.double() - want).norm() / want.norm()).item()


def _check_grads(got, want, key, name, fp32=None):
    """Normwise relative error of each grad below GRAD_TOL[key] — or, given `fp32` (the same
    grads by torch autograd in float32), below 4x that evaluation's own error: with a few rows
    the grads hang on per-row dot products over H whose float32 cancellation can exceed 1e-5
    for some inputs, and no float32 kernel can beat the problem's conditioning."""
    tol = GRAD_TOL[key]
    refs = fp32 if fp32 is not None else (None,) * len(want)
    for label, gt, w, r in zip(("h", "k", "v", "w_h", "w_k"), got, want, refs, strict=True):
        assert not torch.isnan(gt).any(), f"{name}: grad_{label} has NaN (unwritten?)"
        bound = tol if r is None else max(tol, 4 * _normwise(r, w))
        err = _normwise(gt, w)
        assert err < bound, f"{name}: grad_{label} normwise relative error {err:.2e} >= {bound}"
        torch.testing.assert_close(
            gt.double(),
            w,
            rtol=10 * bound,
            atol=10 * bound * w.abs().max().item(),
            msg=lambda m, label=label: f"{name}: grad_{label}: {m}",
        )


@pytest.mark.parametrize("key", ["bf16", "fp32"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward(key, shape):
    import tileaot

    dtype = DTYPES[key]
    h, k, v, w_h, w_k = _inputs(shape, dtype, seed=sum(shape))
    n = shape[-1]
    rows = h.numel() // n
    name = selected("engram_gate", key, [(rows, n)] * 3 + [(1, n)] * 2 + [(rows, n), (rows,)])
    SEEN.add(name)
    out = torch.full_like(h, float("nan"))
    g = torch.full(shape[:-1], float("nan"), device="cuda")
    got, got_g = tileaot.engram_gate(h, k, v, w_h, w_k, EPS, return_gate=True, out=(out, g))
    torch.cuda.synchronize()
    assert got is out and got_g is g
    want, want_g = _forward64(*(x.double() for x in (h, k, v, w_h, w_k)))
    rtol, atol = OUT_TOL[key]
    torch.testing.assert_close(
        out.double(), want, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}"
    )
    torch.testing.assert_close(
        g.double(), want_g, rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}"
    )
    # The working-precision reference agrees too (it is what bench/users compare against).
    ref, ref_g = _reference_module().reference(h, k, v, w_h, w_k, EPS)
    torch.testing.assert_close(out, ref, rtol=rtol, atol=atol)
    torch.testing.assert_close(g, ref_g, rtol=1e-5, atol=1e-6)
    # save_for_backward: the same out and gate bit for bit, plus the statistics.
    flat = [(rows, n)] * 3 + [(1, n)] * 2 + [(rows, n)] + [(rows,)] * 4
    save = selected("engram_gate_save", key, flat)
    SEEN.add(save)
    stats = tuple(torch.full(shape[:-1], float("nan"), device="cuda") for _ in range(4))
    got = tileaot.engram_gate(h, k, v, w_h, w_k, EPS, save_for_backward=True,
                              out=(torch.full_like(h, float("nan")), *stats))  # fmt: skip
    torch.cuda.synchronize()
    assert torch.equal(got[0], out) and torch.equal(got[2], g), save
    want_stats = _saved64(h, k, v, w_h, w_k)
    for label, a, b in zip(("dot", "g", "rstd_h", "rstd_k"), got[1:], want_stats, strict=True):
        assert a.dtype == torch.float32 and a.shape == shape[:-1], label
        atol = 1e-5 * b.abs().max().item() if label == "dot" else 1e-6  # dot: cancellation
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=atol,
                                   msg=lambda m, lb=label: f"{save}: {lb}: {m}")  # fmt: skip


@pytest.mark.parametrize("key", ["bf16", "fp32"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward(key, shape):
    import tileaot

    dtype = DTYPES[key]
    h, k, v, w_h, w_k = _inputs(shape, dtype, seed=7 * sum(shape))
    g = torch.Generator(device="cuda").manual_seed(11 * sum(shape))  # not the test order's RNG
    go = torch.randn(shape, device="cuda", generator=g).to(dtype)
    n = shape[-1]
    rows = h.numel() // n
    flat = [(rows, n)] * 4 + [(1, n)] * 2 + [(rows,)] * 4 + [(rows, n)] * 3 + [(1, n)] * 2
    name = selected("engram_gate_backward", key, flat + [(_blocks(key, rows, n), n)])
    SEEN.add(name)
    out = _grad_buffers(h, v, w_h, w_k)
    saved = tileaot.engram_gate(h, k, v, w_h, w_k, EPS, save_for_backward=True)[1:]
    got = tileaot.engram_gate_backward(go, h, k, v, w_h, w_k, saved=saved, out=out)
    torch.cuda.synchronize()
    assert all(a is b for a, b in zip(got, out, strict=True))
    inputs = (go, h, k, v, w_h, w_k)
    fp32 = _grads64(*inputs, dtype=torch.float32) if key == "fp32" else None
    _check_grads(got, _grads64(*inputs), key, name, fp32)


@pytest.mark.parametrize("clamp", [0.0, 1e-6])
@pytest.mark.parametrize("key", ["bf16", "fp32"])
@pytest.mark.parametrize("n", [7168, 1000])
def test_backward_at_s_zero_is_finite_and_floored(key, n, clamp):
    """Zero h rows and zero k rows have s = 0 exactly: below a clamp > 0 no gradient passes the
    gate; with clamp 0 the documented floor of the signed-sqrt slope (kernels_py reference,
    float64) gives finite gradients. The kernel matches both."""
    import tileaot

    bwd = importlib.import_module("kernels_py.engram.engram_gate_backward")
    dtype = DTYPES[key]
    h, k, v, w_h, w_k = _inputs((64, n), dtype, seed=n)
    h[3] = 0
    k[10] = 0
    go = torch.randn(64, n, device="cuda").to(dtype)
    got = tileaot.engram_gate_backward(go, h, k, v, w_h, w_k, EPS, clamp_value=clamp)
    torch.cuda.synchronize()
    x64 = [x.double() for x in (h, k, v, w_h, w_k)]
    want = bwd.reference(go.double(), *x64, _saved64(h, k, v, w_h, w_k, clamp), clamp)
    assert all(torch.isfinite(x).all() for x in got)
    _check_grads(got, want, key, f"engram_gate_backward {key} H={n} s=0 clamp={clamp}")


@pytest.mark.parametrize("key", ["bf16", "fp32"])
def test_backward_is_deterministic(key):
    import tileaot

    h, k, v, w_h, w_k = _inputs(sized((3000, 7168)), DTYPES[key], seed=1)
    go = torch.randn_like(h)
    first = tileaot.engram_gate_backward(go, h, k, v, w_h, w_k, EPS)
    second = tileaot.engram_gate_backward(go, h, k, v, w_h, w_k, EPS)
    torch.cuda.synchronize()
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("shared", [False, True], ids=["v", "shared_v"])
def test_autograd_matches_the_backward_op(shared):
    import tileaot

    make = _shared_inputs if shared else _inputs
    h, k, v, w_h, w_k = make((16, 4, 7168), torch.bfloat16, seed=2)
    leaves = [x.clone().requires_grad_() for x in (h, k, v, w_h, w_k)]
    out = tileaot.engram_gate(*leaves, EPS)
    go = torch.randn_like(out)
    out.backward(go)
    want = tileaot.engram_gate_backward(go, h, k, v, w_h, w_k, EPS)
    assert leaves[2].grad.shape == v.shape
    for leaf, w in zip(leaves, want, strict=True):  # weight grads: fp32, cast by autograd
        assert torch.equal(leaf.grad, w.to(leaf.dtype))
    # An expanded (stride-0) incoming gradient goes through too.
    out = tileaot.engram_gate(*leaves, EPS)
    out.float().sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in leaves)


# [T, G, H] h with v [T, 1, H] (one value row per token, shared by its G rows).
SHARED_SHAPES = [(1, 4, 7168), (7, 4, 7168), (4001, 4, 7168), (8001, 2, 2048), (33, 4, 1000),
                 (5, 3, 129)]  # fmt: skip
SHARED_SHAPES = [sized(s) for s in SHARED_SHAPES]


def _shared_inputs(shape, dtype, seed):
    h, k, v, w_h, w_k = _inputs(shape, dtype, seed)
    return h, k, v[:, :1].contiguous(), w_h, w_k


@pytest.mark.parametrize("key", ["bf16", "fp32"])
@pytest.mark.parametrize("shape", SHARED_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_shared_value(key, shape):
    """Against float64 torch broadcasting, and bit for bit against the same call with v
    expanded to h's shape (the kernel reads the same value row either way)."""
    import tileaot

    h, k, v, w_h, w_k = _shared_inputs(shape, DTYPES[key], seed=3 * sum(shape))
    out = torch.full_like(h, float("nan"))
    g = torch.full(shape[:-1], float("nan"), device="cuda")
    tileaot.engram_gate(h, k, v, w_h, w_k, EPS, return_gate=True, out=(out, g))
    full, full_g = tileaot.engram_gate(
        h, k, v.expand_as(h).contiguous(), w_h, w_k, EPS, return_gate=True
    )
    torch.cuda.synchronize()
    assert torch.equal(out, full) and torch.equal(g, full_g)
    want, want_g = _forward64(*(x.double() for x in (h, k, v, w_h, w_k)))
    rtol, atol = OUT_TOL[key]
    torch.testing.assert_close(out.double(), want, rtol=rtol, atol=atol)
    torch.testing.assert_close(g.double(), want_g, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("key", ["bf16", "fp32"])
@pytest.mark.parametrize("shape", SHARED_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward_shared_value(key, shape):
    """grad_v of a shared v is [T, 1, H]: the float32 sum of the rows' terms of the expanded
    call, rounded once; the other gradients equal the expanded call's bit for bit; all within
    tolerance of float64 autograd."""
    import tileaot

    dtype = DTYPES[key]
    h, k, v, w_h, w_k = _shared_inputs(shape, dtype, seed=5 * sum(shape))
    gen = torch.Generator(device="cuda").manual_seed(13 * sum(shape))
    go = torch.randn(shape, device="cuda", generator=gen).to(dtype)
    out = _grad_buffers(h, v, w_h, w_k)
    got = tileaot.engram_gate_backward(go, h, k, v, w_h, w_k, EPS, out=out)
    full = tileaot.engram_gate_backward(go, h, k, v.expand_as(h).contiguous(), w_h, w_k, EPS)
    gate = tileaot.engram_gate(h, k, v, w_h, w_k, EPS, return_gate=True)[1]
    torch.cuda.synchronize()
    assert all(a is b for a, b in zip(got, out, strict=True))
    assert got[2].shape == v.shape
    for i in (0, 1, 3, 4):
        assert torch.equal(got[i], full[i])
    # grad_v: each token's rows' g * go summed in float32 from the saved gate, rounded once.
    want_v = (go.float() * gate[..., None]).sum(-2, keepdim=True).to(dtype)
    torch.testing.assert_close(got[2], want_v, rtol=2**-8, atol=0)
    inputs = (go, h, k, v, w_h, w_k)
    fp32 = _grads64(*inputs, dtype=torch.float32) if key == "fp32" else None
    _check_grads(got, _grads64(*inputs), key, f"shared v {key} {shape}", fp32)


def test_launch_is_ordered_on_the_callers_stream():
    """h written on a side stream after a long sleep: a launch on any other stream would read
    the poisoned h and fail."""
    import tileaot

    src, k, v, w_h, w_k = _inputs((256, 7168), torch.bfloat16, seed=3)
    ref, _ = _reference_module().reference(src, k, v, w_h, w_k, EPS)

    def call(h):
        out = tileaot.engram_gate(h, k, v, w_h, w_k, EPS)
        return out, tileaot.engram_gate_backward(torch.ones_like(h), h, k, v, w_h, w_k, EPS)

    def check(got):
        torch.testing.assert_close(got[0], ref, rtol=1.6e-2, atol=1e-2)
        assert all(torch.isfinite(x).all() for x in got[1])

    assert_ordered_on_callers_stream(call, check, src)


# Per-branch weights [G, H] (TileKernels' weight_hidden / weight_embed).
BRANCH_SHAPES = [(7, 4, 7168), (1001, 4, 4096), (33, 4, 2048), (3000, 4, 7168), (5, 4, 1000),
                 (3, 2, 129), (1, 1, 7168)]  # fmt: skip
BRANCH_SHAPES = [sized(s) for s in BRANCH_SHAPES]


def _branch_inputs(shape, dtype, seed, shared_v=False):
    h, k, v, w_h, w_k = _inputs(shape, dtype, seed)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    w_h, w_k = (
        (1 + 0.3 * torch.randn(shape[-2:], device="cuda", generator=gen)).to(dtype) for _ in "hk"
    )
    for _ in range(100):  # redraw k where |s| is small, now with the branches' weights
        small = _scaled_dot(h, k, w_h, w_k).abs() < 0.25
        if not small.any():
            break
        k[small] = torch.randn(int(small.sum()), shape[-1], device="cuda").to(dtype)
    return h, k, v[..., :1, :].contiguous() if shared_v else v, w_h, w_k


@pytest.mark.parametrize("shared_v", [False, True], ids=["v", "shared_v"])
@pytest.mark.parametrize("key", ["bf16", "fp32"])
@pytest.mark.parametrize("shape", BRANCH_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_per_branch_weights_forward_and_backward(key, shape, shared_v):
    import tileaot

    dtype = DTYPES[key]
    h, k, v, w_h, w_k = _branch_inputs(shape, dtype, sum(shape), shared_v)
    rows, n, g_ = h.numel() // shape[-1], shape[-1], shape[-2]
    mv = v.numel() // n
    name = selected("engram_gate", key, [(rows, n)] * 2 + [(mv, n)] + [(g_, n)] * 2
                   + [(rows, n), (rows,)])  # fmt: skip
    SEEN.add(name)
    out = torch.full_like(h, float("nan"))
    g = torch.full(shape[:-1], float("nan"), device="cuda")
    tileaot.engram_gate(h, k, v, w_h, w_k, EPS, return_gate=True, out=(out, g))
    gen = torch.Generator(device="cuda").manual_seed(17 * sum(shape))
    go = torch.randn(shape, device="cuda", generator=gen).to(dtype)
    grads = _grad_buffers(h, v, w_h, w_k)
    tileaot.engram_gate_backward(go, h, k, v, w_h, w_k, EPS, out=grads)
    torch.cuda.synchronize()
    want, want_g = _forward64(*(x.double() for x in (h, k, v, w_h, w_k)))
    rtol, atol = OUT_TOL[key]
    torch.testing.assert_close(out.double(), want, rtol=rtol, atol=atol)
    torch.testing.assert_close(g.double(), want_g, rtol=1e-5, atol=1e-6)
    inputs = (go, h, k, v, w_h, w_k)
    fp32 = _grads64(*inputs, dtype=torch.float32) if key == "fp32" else None
    _check_grads(grads, _grads64(*inputs), key, f"per-branch {key} {shape}", fp32)
    # The same weight row for every branch gives the shared-weight call's results, bit for bit.
    same = tuple(w[:1].expand_as(w).contiguous() for w in (w_h, w_k))
    a = tileaot.engram_gate(h, k, v, *same, EPS)
    b = tileaot.engram_gate(h, k, v, w_h[0], w_k[0], EPS)
    ga = tileaot.engram_gate_backward(go, h, k, v, *same, EPS)
    gb = tileaot.engram_gate_backward(go, h, k, v, w_h[0], w_k[0], EPS)
    torch.cuda.synchronize()
    assert torch.equal(a, b)
    for i in range(3):
        assert torch.equal(ga[i], gb[i])
    # Weight gradients: summed per branch, so their sum over branches is the shared one's, up
    # to one rounding of each stored term (bf16: half an ulp, 2^-9 relative) and fp32 order;
    # a bound on |differences| relative to each element's own terms, which may cancel.
    ulp = 2.0**-8 if key == "bf16" else 1e-5
    for i in (3, 4):
        terms, shared = ga[i].float(), gb[i].float()
        bound = ulp * (terms.abs().sum(0) + shared.abs()) + 1e-6
        excess = (terms.sum(0) - shared).abs() - bound
        assert excess.max() <= 0, f"grad {i}: {int((excess > 0).sum())} elements off"


@pytest.mark.parametrize("key", ["bf16", "fp32"])
@pytest.mark.parametrize("shape", [sized((2000, 4, 7168)), (300, 4, 1000)], ids=str)
def test_clamp_value_forward_and_backward(key, shape):
    """A clamp that catches some rows (|s| is redrawn >= 0.25; clamp 0.5): the gate is
    sigmoid(sign(s) sqrt(clamp)) there and no gradient passes it, as in the reference."""
    import tileaot

    bwd = importlib.import_module("kernels_py.engram.engram_gate_backward")
    dtype = DTYPES[key]
    h, k, v, w_h, w_k = _branch_inputs(shape, dtype, 3 * sum(shape), shared_v=True)
    s = _scaled_dot(h, k, w_h, w_k)
    below = s.abs() < 0.5
    assert 0 < int(below.sum()) < below.numel()
    out, g = tileaot.engram_gate(h, k, v, w_h, w_k, EPS, 0.5, return_gate=True)
    go = torch.randn_like(h)
    grads = tileaot.engram_gate_backward(go, h, k, v, w_h, w_k, EPS, clamp_value=0.5)
    torch.cuda.synchronize()
    want, want_g = _reference_module().reference(*(x.double() for x in (h, k, v, w_h, w_k)),
                                                 EPS, 0.5)  # fmt: skip
    torch.testing.assert_close(g.double(), want_g, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g[below].double(), torch.sigmoid(s.sign() * 0.5**0.5)[below])
    rtol, atol = OUT_TOL[key]
    torch.testing.assert_close(out.double(), want, rtol=rtol, atol=atol)
    x64 = [x.double() for x in (h, k, v, w_h, w_k)]
    want_grads = bwd.reference(go.double(), *x64, _saved64(h, k, v, w_h, w_k, 0.5), 0.5)
    _check_grads(grads, want_grads, key, f"clamp 0.5 {key} {shape}")
    assert (grads[1][below] == 0).all()  # grad_k: only the gate path, closed below the clamp


@pytest.mark.parametrize("hidden", [2048, 4096, 7168])
@pytest.mark.parametrize("hc", [1, 4])
@pytest.mark.parametrize("tokens", [1023, 4096])
def test_matches_tile_kernels_reference_within_its_bounds(tokens, hc, hidden):
    """TileKernels' engram tests' data (randn bf16, eps 1e-20, clamp 1e-6) and bounds:
    calc_diff < 2e-10 for out and the gate, < 1e-8 for every gradient (float32 weight
    gradients, as TileKernels') against autograd of its reference, the backward fed the
    statistics its reference forward saved (as TileKernels' backward test feeds its kernel)."""
    import tileaot
    from _tile_kernels import calc_diff, tk

    ref_fn = tk("engram").engram_gate_ref
    tokens = sized((tokens, hc, hidden))[0]
    x, k = (torch.randn(tokens, hc, hidden, dtype=torch.bfloat16, device="cuda") for _ in "xk")
    v = torch.randn(tokens, hidden, dtype=torch.bfloat16, device="cuda")
    wh, we = (torch.randn(hc, hidden, dtype=torch.bfloat16, device="cuda") for _ in "he")
    go = torch.randn_like(x)
    out, g = tileaot.engram_gate(x, k, v[:, None], wh, we, 1e-20, 1e-6, return_gate=True)
    leaves = [x.clone(), k.clone(), v.clone(), wh.float(), we.float()]
    for t in leaves:
        t.requires_grad_(True)
    want, *saved = ref_fn(*leaves, 1e-6, 1e-20, save_for_backward=True)
    saved = [t.detach().contiguous() for t in saved]
    grads = tileaot.engram_gate_backward(go, x, k, v[:, None], wh, we, saved=saved,
                                         clamp_value=1e-6)  # fmt: skip
    want.backward(go)
    want_g = saved[1]
    assert calc_diff(out, want) < 2e-10
    assert calc_diff(g, want_g) < 2e-10
    for name, a, leaf in zip(("x", "k", "v", "wh", "we"), grads, leaves, strict=True):
        assert a.dtype == leaf.grad.dtype, name
        bound = 1e-8
        diff = calc_diff(a.reshape(leaf.shape), leaf.grad)
        assert diff < bound, f"grad_{name}: calc_diff {diff:.3e} >= {bound}"


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised(OPS, SEEN)
