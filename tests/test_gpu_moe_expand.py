"""GPU tests of moe_expand: every key x specialisation x generic odd sizes against the torch
reference, bit-exact (rows, scales, offsets and positions are all exact).

Outputs are poisoned before each call (0xFF bytes: NaN in bf16 and e4m3, -7 in the int32
outputs, NaN scales) so an unwritten element fails. Routing includes dropped slots (-1),
out-of-range experts (>= E and < -1, which must be skipped), repeated experts within a token
and experts that get no token. Rows at or past expert_offsets[E] are documented as unwritten
and not compared. Each test checks which variant served it; the last test checks that the tests
together exercised every moe_expand variant built for this GPU.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

SEEN: set[str] = set()
GROUP = 128
F8 = torch.float8_e4m3fn


def _reference():
    from kernels_py.moe.moe_expand import reference

    return reference


def _select(key: str, shapes: list[tuple[int, ...]]) -> str:
    """Name of the variant the runtime picks for these shapes on device 0."""
    from tileaot import _lib

    native = _lib.native()
    flat = tuple(d for s in shapes for d in s)
    return native.select(native.lookup("moe_expand", key), 0, flat)


def _routing(tokens: int, slots: int, experts: int, used: int | None = None) -> torch.Tensor:
    """idx on the GPU: experts drawn from the first `used` (the rest get no token), ~10 %
    dropped, a few out of range, repeats allowed."""
    used = used or experts
    idx = torch.randint(0, used, (tokens, slots), dtype=torch.int32, device="cuda")
    noise = torch.rand(tokens, slots, device="cuda")
    idx[noise < 0.1] = -1
    idx[(noise >= 0.1) & (noise < 0.12)] = experts + 5
    idx[(noise >= 0.12) & (noise < 0.13)] = -3
    return idx


# (tokens, slots, experts, experts used, hidden): generic and specialised E, odd sizes,
# more entries than one chunk (1024) and than one window of the copy (2048), a last window
# that is not full.
CASES = [
    (1, 1, 1, None, 256),
    (37, 8, 256, None, 7168),
    (4099, 8, 256, 200, 7168),
    (300, 6, 64, 50, 2048),
    (513, 8, 128, None, 4096),
    (1000, 4, 1000, None, 512),
    (64, 2, 8, None, 1152),
    (257, 3, 1024, 700, 384),
    (33, 8, 16, 3, 7168),
]
BF16_ODD_H = [(19, 4, 32, None, 13), (70, 2, 64, None, 1000), (5, 8, 256, None, 4100)]


def _call(key, tokens, slots, experts, used, h, alignment):
    import tileaot

    x = (torch.randn(tokens, h, device="cuda") * 4).to(torch.bfloat16 if key == "bf16" else F8)
    x_scale = torch.rand(tokens, h // GROUP, device="cuda") + 0.5 if key == "e4m3" else None
    idx = _routing(tokens, slots, experts, used)
    rows = tokens * slots + experts * (alignment - 1)
    poison = torch.full((rows, h * x.element_size()), 0xFF, dtype=torch.uint8, device="cuda")
    xs = poison.view(x.dtype)
    offsets = torch.full((experts + 1,), -7, dtype=torch.int32, device="cuda")
    pos = torch.full((tokens, slots), -7, dtype=torch.int32, device="cuda")
    out = (xs, offsets, pos)
    shapes = [(tokens, h), (tokens, slots), (rows, h), (experts + 1,), (tokens, slots)]
    chunks = -(-(tokens * slots) // 1024)
    if key == "e4m3":
        xss = torch.full((rows, h // GROUP), float("nan"), device="cuda")
        out += (xss,)
        shapes = shapes[:1] + [x_scale.shape] + shapes[1:3] + [xss.shape] + shapes[3:]
    name = _select(key, [*shapes, (chunks, experts), (experts,), (tokens * slots,)])
    SEEN.add(name)
    result = tileaot.moe_expand(x, idx, experts, alignment, x_scale=x_scale, out=out)
    torch.cuda.synchronize()
    assert all(r is o for r, o in zip(result, out, strict=False))
    return name, x, x_scale, idx, result


def _check(name, x, x_scale, idx, result, experts, alignment):
    want_xs, want_off, want_pos, want_scale = _reference()(x, idx, experts, alignment, x_scale)
    xs, offsets, pos, xss = result
    assert torch.equal(offsets, want_off), f"{name}: expert_offsets differ"
    assert torch.equal(pos, want_pos), f"{name}: token_pos differs"
    used = int(want_off[-1])
    bad = (xs[:used].view(torch.uint8) != want_xs[:used].view(torch.uint8)).any(-1)
    assert not bad.any(), f"{name}: rows {bad.nonzero()[:8].flatten().tolist()} of x_sorted differ"
    if x_scale is not None:
        assert torch.equal(xss[:used], want_scale[:used]), f"{name}: x_sorted_scale differs"


@pytest.mark.parametrize("alignment", [1, 16, 128])
@pytest.mark.parametrize("key", ["bf16", "e4m3"])
@pytest.mark.parametrize(("tokens", "slots", "experts", "used", "h"), CASES)
def test_moe_expand(key, tokens, slots, experts, used, h, alignment):
    name, *args = _call(key, tokens, slots, experts, used, h, alignment)
    _check(name, *args, experts, alignment)


@pytest.mark.parametrize("alignment", [1, 16, 3])
@pytest.mark.parametrize(("tokens", "slots", "experts", "used", "h"), BF16_ODD_H)
def test_moe_expand_bf16_any_hidden_size(tokens, slots, experts, used, h, alignment):
    name, *args = _call("bf16", tokens, slots, experts, used, h, alignment)
    _check(name, *args, experts, alignment)


def test_moe_expand_is_deterministic():
    import tileaot

    x = torch.randn(4096, 512, device="cuda").bfloat16()
    idx = torch.randint(0, 8, (4096, 8), dtype=torch.int32, device="cuda")  # heavy collisions
    first = tileaot.moe_expand(x, idx, 8, 16)
    for _ in range(3):
        again = tileaot.moe_expand(x, idx, 8, 16)
        assert torch.equal(again.token_pos, first.token_pos)
        assert torch.equal(again.expert_offsets, first.expert_offsets)


def test_moe_expand_all_dropped_and_empty():
    import tileaot

    x = torch.randn(10, 256, device="cuda").bfloat16()
    idx = torch.full((10, 4), -1, dtype=torch.int32, device="cuda")
    xs, offsets, pos, _ = tileaot.moe_expand(x, idx, 64, 128)
    torch.cuda.synchronize()
    assert torch.equal(offsets.cpu(), torch.zeros(65, dtype=torch.int32))
    assert torch.equal(pos, idx)
    xs, offsets, pos, _ = tileaot.moe_expand(x[:0], idx[:0], 64, 128)
    assert torch.equal(offsets.cpu(), torch.zeros(65, dtype=torch.int32)) and pos.shape == (0, 4)


def test_moe_expand_runs_in_order_on_the_callers_stream():
    """Inputs written on a side stream after a long sleep: any of the four kernels launched on
    another stream would read the poisoned inputs."""
    import tileaot

    x_src = torch.randn(2048, 1024, device="cuda").bfloat16()
    idx_src = _routing(2048, 8, 256)
    assert_ordered_on_callers_stream(
        lambda x, idx: tileaot.moe_expand(x, idx, 256, 16),
        lambda result: _check("stream", x_src, None, idx_src, result, 256, 16),
        x_src,
        idx_src,
        poison=(float("nan"), 3),
    )


def test_every_moe_expand_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised(("moe_expand",), SEEN)
