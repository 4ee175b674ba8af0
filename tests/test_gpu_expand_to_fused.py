"""GPU tests of expand_to_fused against kernels_py.moe.expand_to_fused.reference and
TileKernels' torch reference, byte for byte (padding rows zero included).

Mappings come from tests/_fused_mapping.py (TileKernels' get_fused_mapping layout) over
routings with dropped slots, repeated experts and experts that get no token, with and without
rows past the last expert's run; also TileKernels' own get_fused_mapping where its kernel runs.
Both keys (bf16, e4m3) on the 16-byte path (rows of a multiple of 16 bytes) and the scalar path
(odd H); rows longer than one block's chunk (8 KB). The output is poisoned (0xFF bytes: NaN
in both dtypes) first, so a row left unwritten fails.
"""

from __future__ import annotations

import pytest
from _fused_mapping import fused_mapping
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream, selected

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "expand_to_fused"
SEEN: set[str] = set()
KEYS = {"bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}
# (tokens, K, experts, alignment, H, extra rows past the last run)
CASES = [
    (1, 1, 1, 1, 256, 0),
    (7, 8, 256, 128, 7168, 0),
    (129, 8, 256, 16, 7168, 40),
    (4001, 8, 256, 128, 7168, 0),
    (300, 6, 64, 1, 2048, 5),
    (33, 8, 16, 32, 9000, 0),  # rows past one chunk, not a whole number of chunks
    (19, 4, 32, 16, 13, 3),  # odd H: the scalar path for both dtypes
    (70, 2, 64, 2, 1000, 0),  # bf16 16-byte rows, e4m3 not (1000 % 16 != 0)
]


def _routing(tokens: int, k: int, experts: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(tokens * k + experts)
    idx = torch.randint(0, max(experts - 2, 1), (tokens, k), device="cuda", generator=gen)
    idx[torch.rand(tokens, k, device="cuda", generator=gen) < 0.1] = -1
    return idx


def _check(key, x, pos, pte, got) -> None:
    from _tile_kernels import tk

    from kernels_py.moe.expand_to_fused import reference

    want = reference(x, pos, pte)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), key
    theirs = tk("expand_to_fused").expand_to_fused(x.view(torch.uint8), pos.long(), pte)
    assert torch.equal(got.view(torch.uint8), theirs), key


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("key", sorted(KEYS))
def test_expand_to_fused(key, case):
    import tileaot

    tokens, k, e, align, h, extra = case
    x = (torch.randn(tokens, h, device="cuda") * 4).to(KEYS[key])
    x.view(-1)[:3] = torch.tensor([float("nan"), -0.0, float("inf")]).to(x.dtype)
    total = len(fused_mapping(_routing(tokens, k, e), e, align)[0])
    pte, pos = fused_mapping(_routing(tokens, k, e), e, align, total + extra)
    rows = pte.shape[0]
    SEEN.add(selected(OP, key, [(tokens, h), (tokens, k), (rows,), (rows, h)]))
    poison = torch.full((rows, h * x.element_size()), 0xFF, dtype=torch.uint8, device="cuda")
    got = tileaot.expand_to_fused(x, pos, pte, out=poison.view(x.dtype))
    torch.cuda.synchronize()
    _check(key, x, pos, pte, got)


@pytest.mark.parametrize("key", sorted(KEYS))
def test_with_tile_kernels_mapping(key):
    """The mapping from TileKernels' own get_fused_mapping kernel, where it runs here."""
    import tileaot

    try:
        import tile_kernels.moe as tkm

        idx = _routing(2048, 8, 256)
        pte, _, _, pos, *_ = tkm.get_fused_mapping(idx, 256, 0, 128)
    except Exception as e:  # noqa: BLE001 - TileKernels' JIT needs its own toolchain
        pytest.skip(f"TileKernels' get_fused_mapping does not run here ({type(e).__name__})")
    x = torch.randn(2048, 7168, device="cuda").to(KEYS[key])
    _check(key, x, pos, pte, tileaot.expand_to_fused(x, pos, pte))


def test_launch_is_ordered_on_the_callers_stream():
    """x written on a side stream after a long sleep: a launch on any other stream would copy
    the zeros."""
    import tileaot

    src = torch.randn(4096, 7168, device="cuda").to(torch.bfloat16)
    pte, pos = fused_mapping(_routing(4096, 8, 256), 256, 128)
    assert_ordered_on_callers_stream(
        lambda x: tileaot.expand_to_fused(x, pos, pte),
        lambda got: _check("bf16", src, pos, pte, got),
        src,
        poison=0,
    )


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
