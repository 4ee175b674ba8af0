"""GPU tests of swiglu_backward against kernels_py.act.swiglu_backward.reference and TileKernels'
own reference (`tile_kernels.torch.swiglu_backward`, its test's data: bf16 rows expanded into
a fused mapping, cast to e4m3 with per-32/128 scales, bf16 gradients, rand weights).

Every key (float32 / bfloat16 out x g32 / g128) x clamp (None, 10.0, 0.5, TileKernels' test
values) on hidden sizes from one group to rows longer than one block's chunk (1024 columns)
and not a whole number of chunks; mappings with dropped slots, padding rows and spare rows
past the last expert. Outputs are poisoned (NaN) before the call, weight_grad included, so
an unrouted pair left unwritten fails. out and x_grad bit-exact, weight_grad within
TileKernels' bound (1e-4 absolute and relative).
"""

from __future__ import annotations

import importlib

import pytest
from _fused_mapping import fused_mapping
from _gpu_helpers import (
    assert_every_variant_exercised,
    behind_a_busy_stream,
    selected,
    skip_big_under_sanitizer,
)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "swiglu_backward"
SEEN: set[str] = set()
OUT = {"fp32": torch.float32, "bf16": torch.bfloat16}
# (tokens, K, experts, alignment, H, spare rows)
CASES = [
    (1, 1, 1, 1, 128, 0),
    (7, 8, 16, 16, 256, 3),
    (129, 8, 64, 128, 2048, 0),
    (300, 6, 32, 16, 1536, 5),
    (64, 8, 256, 128, 7168, 0),
    (33, 2, 8, 32, 1152, 0),  # one chunk and a part
]


def _ref():
    return importlib.import_module("kernels_py.act.swiglu_backward").reference


def _mapping(tokens, k, experts, align, spare):
    gen = torch.Generator(device="cuda").manual_seed(tokens * k + experts)
    idx = torch.randint(0, experts, (tokens, k), device="cuda", generator=gen)
    idx[torch.rand(tokens, k, device="cuda", generator=gen) < 0.1] = -1
    _, tk2p = fused_mapping(idx, experts, align)
    tk2p = tk2p.cuda()
    rows = (int(tk2p.max()) + 1 if tk2p.numel() else 0) + spare
    p2tk = torch.full((rows,), -1, dtype=torch.int32, device="cuda")
    live = tk2p.reshape(-1) >= 0
    flat = torch.arange(tokens * k, dtype=torch.int32, device="cuda")
    p2tk[tk2p.reshape(-1)[live].long()] = flat[live]
    return p2tk, tk2p


def _inputs(p2tk, tk2p, h, p):
    import tileaot

    tokens, k = tk2p.shape
    rows = p2tk.shape[0]
    x = torch.randn(rows, 2 * h, dtype=torch.bfloat16, device="cuda")
    x[p2tk < 0] = 0  # padding rows are zero after expand_to_fused
    x_fp8, x_sf = tileaot.per_token_cast_fp8(x, p)
    grad_out = torch.randn(rows, h, dtype=torch.bfloat16, device="cuda")
    weight = torch.rand(tokens, k, device="cuda")
    return x_fp8, x_sf, grad_out, weight


def _run(args, clamp, out_key):
    import tileaot

    x, x_sf, grad_out, weight, p2tk, tk2p = args
    rows, h = grad_out.shape
    dt = OUT[out_key]
    group = 2 * h // x_sf.shape[1]
    shapes = [x.shape, x_sf.shape, grad_out.shape, weight.shape, p2tk.shape, tk2p.shape]
    shapes += [(rows, h), (rows, 2 * h), weight.shape]
    SEEN.add(selected(OP, f"{out_key},g{group}", shapes))
    nan = float("nan")
    out = (
        torch.full((rows, h), nan, dtype=dt, device="cuda"),
        torch.full((rows, 2 * h), nan, dtype=dt, device="cuda"),
        torch.full(weight.shape, nan, device="cuda"),
    )
    got = tileaot.swiglu_backward(*args, clamp, out_dtype=dt, out=out)
    assert all(g is o for g, o in zip(got, out, strict=True))
    torch.cuda.synchronize()
    return got


def _check(got, want):
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    torch.testing.assert_close(got[2], want[2], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("clamp", [None, 10.0, 0.5])
@pytest.mark.parametrize("group", [32, 128])
@pytest.mark.parametrize("out_key", sorted(OUT))
def test_swiglu_backward(out_key, group, clamp, case):
    tokens, k, e, align, h, spare = case
    p2tk, tk2p = _mapping(tokens, k, e, align, spare)
    skip_big_under_sanitizer(p2tk.numel() * 2 * h)
    args = (*_inputs(p2tk, tk2p, h, group), p2tk, tk2p)
    got = _run(args, clamp, out_key)
    _check(got, _ref()(*args, clamp, OUT[out_key]))
    assert not got[2][tk2p < 0].any()  # unrouted pairs: zero


@pytest.mark.parametrize("clamp", [None, 0.5])
@pytest.mark.parametrize("group", [32, 128])
def test_matches_tile_kernels_reference(group, clamp):
    """TileKernels' reference on the GPU (its fma through torch.compile), and its fused
    kernel's bf16 outputs as its test derives them (``.to(bfloat16)`` of the reference's)."""
    from _tile_kernels import tk

    p2tk, tk2p = _mapping(512, 8, 64, 128, 0)
    args = (*_inputs(p2tk, tk2p, 2048, group), p2tk, tk2p)
    x, x_sf, grad_out, weight = args[:4]
    try:
        theirs = tk("swiglu").swiglu_backward((x, x_sf), grad_out, weight, p2tk, tk2p, group, clamp)
    except Exception as err:  # noqa: BLE001 - torch.compile needs its GPU toolchain
        pytest.skip(f"TileKernels' reference does not run here ({type(err).__name__})")
    _check(_run(args, clamp, "fp32"), theirs)
    bf = _run(args, clamp, "bf16")
    assert torch.equal(bf[0], theirs[0].bfloat16()) and torch.equal(bf[1], theirs[1].bfloat16())


def test_special_values():
    """Saturated e4m3 codes (±448 times the scale), zeros and -0.0: exp overflows to inf for
    large negative gates (g / inf = -0, s = 0), as torch's do."""
    p2tk, tk2p = _mapping(16, 4, 4, 16, 0)
    x, x_sf, grad_out, weight = _inputs(p2tk, tk2p, 256, 128)
    codes = torch.tensor([448.0, -448.0, 0.0, -0.0, 1.0, -1.0], device="cuda")
    x[:, : codes.numel()] = codes.to(x.dtype)
    x_sf[:, 0] = 1.0  # -448 * 1: exp(448) overflows
    args = (x, x_sf, grad_out, weight, p2tk, tk2p)
    for clamp in (None, 7.0):
        _check(_run(args, clamp, "fp32"), _ref()(*args, clamp))


def test_launch_is_ordered_on_the_callers_stream():
    """grad_out written on a side stream after a long sleep: a launch on another stream would
    read the zeros."""
    import tileaot

    p2tk, tk2p = _mapping(1024, 8, 64, 128, 0)
    x, x_sf, src, weight = _inputs(p2tk, tk2p, 2048, 128)
    grad_out = torch.zeros_like(src)
    with behind_a_busy_stream():
        grad_out.copy_(src)
        got = tileaot.swiglu_backward(x, x_sf, grad_out, weight, p2tk, tk2p)
    torch.cuda.synchronize()
    _check(got, _ref()(x, x_sf, src, weight, p2tk, tk2p))


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
