"""GPU tests of expand_to_fused_with_sf against kernels_py.moe.expand_to_fused_with_sf.reference
and TileKernels' torch reference, byte for byte (padding rows' data and scales zero, the spare
columns of the column-major scale buffer zero).

expand_to_fused's mappings and sizes (tests/test_gpu_expand_to_fused.py: dropped slots, empty
experts, rows past the last run, rows longer than one chunk, odd H on the scalar path) with
scale rows of ceil(H / 128) and ceil(H / 32) float32 columns (NaN and -0.0 bits planted) or
packed int32 words (any bits), every key (fp32 / i32 scales, row- / column-major), P % 4 of
every value. Both outputs are poisoned (0xFF bytes) first, so a value left unwritten fails.
"""

from __future__ import annotations

import os

import pytest
from _fused_mapping import fused_mapping
from _gpu_helpers import assert_every_variant_exercised, behind_a_busy_stream, selected
from test_gpu_expand_to_fused import CASES, _routing  # expand_to_fused's mappings and sizes

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "expand_to_fused_with_sf"
SEEN: set[str] = set()
SF = {"fp32": torch.float32, "i32": torch.int32}


def _scales(tokens: int, h: int, n: int, sf: str) -> torch.Tensor:
    groups = -(-h // n)
    cols = groups if sf == "fp32" else -(-groups // 4)
    gen = torch.Generator(device="cuda").manual_seed(tokens * 31 + h + n)
    if sf == "i32":  # packed UE8M0 words: any bits
        shape = (tokens, cols)
        return torch.randint(-(2**31), 2**31 - 1, shape, device="cuda", generator=gen).int()
    s = torch.rand(tokens, cols, device="cuda", generator=gen)
    s.view(-1)[:2] = torch.tensor([float("nan"), -0.0], device="cuda")[: s.numel()]
    return s


def _call(x, x_sf, pos, pte, col: bool, key: str):
    import tileaot

    rows, f = pte.shape[0], x_sf.shape[1]
    sf_shape = (f, -(-rows // 4) * 4) if col else (rows, f)
    t, h = x.shape
    SEEN.add(selected(OP, key, [(t, h), (t, f), tuple(pos.shape), (rows,), (rows, h), sf_shape]))
    out = torch.full((rows, h), 0xFF, dtype=torch.uint8, device="cuda").view(x.dtype)
    out_sf = torch.full(sf_shape, -1, dtype=torch.int32, device="cuda").view(x_sf.dtype)
    got = tileaot.expand_to_fused_with_sf(
        x, x_sf, pos, pte, use_tma_aligned_col_major_sf=col, out=(out, out_sf)
    )
    assert got[0] is out and got[1] is out_sf
    torch.cuda.synchronize()
    return got


def _check(x, x_sf, n, pos, pte, col, got) -> None:
    from _tile_kernels import tk

    from kernels_py.moe.expand_to_fused_with_sf import reference

    out, out_sf = got
    want, want_sf = reference(x, x_sf, pos, pte, "col" if col else "row")
    assert torch.equal(out.view(torch.uint8), want.view(torch.uint8))
    assert torch.equal(out_sf.view(torch.int32), want_sf.view(torch.int32))
    if x_sf.dtype == torch.float32 or col:  # TileKernels takes int32 scales column-major only
        ref = tk("expand_to_fused").expand_to_fused_with_sf
        theirs, theirs_sf = ref((x.view(torch.uint8), x_sf), n, pos.long(), pte, col)
        assert torch.equal(out.view(torch.uint8), theirs)
        view = out_sf[:, : pte.shape[0]].T if col else out_sf
        assert torch.equal(view.view(torch.int32), theirs_sf.view(torch.int32))


@pytest.mark.parametrize("n", [128, 32])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("key", ["fp32,row", "fp32,col", "i32,row", "i32,col"])
def test_expand_to_fused_with_sf(key, case, n):
    sf, layout = key.split(",")
    tokens, k, e, align, h, extra = case
    x = (torch.randn(tokens, h, device="cuda") * 4).to(torch.float8_e4m3fn)
    x_sf = _scales(tokens, h, n, sf)
    total = len(fused_mapping(_routing(tokens, k, e), e, align)[0])
    for more in (extra, extra + 1, extra + 2, extra + 3):  # every P % 4
        pte, pos = fused_mapping(_routing(tokens, k, e), e, align, total + more)
        col = layout == "col"
        got = _call(x, x_sf, pos, pte, col, f"e4m3,{key}")
        _check(x, x_sf, n, pos, pte, col, got)


def test_with_tile_kernels_mapping_and_cast():
    """TileKernels' own get_fused_mapping and FP8 cast, where its kernels run here."""
    import tileaot

    try:
        import tile_kernels.moe as tkm

        idx = _routing(2048, 8, 256)
        pte, _, _, pos, *_ = tkm.get_fused_mapping(idx, 256, 0, 128)
    except Exception as e:  # noqa: BLE001 - TileKernels' JIT needs its own toolchain
        pytest.skip(f"TileKernels' get_fused_mapping does not run here ({type(e).__name__})")
    routed = pos[pos >= 0]
    if routed.numel() != torch.unique(routed).numel():
        # Seen under compute-sanitizer racecheck only (8 and 12 positions given twice in two of
        # three runs; none without it): its mapping kernel then breaks, which is not ours to
        # test (bench/results/2026-12-04b-h200.md). Anywhere else the test cannot judge either.
        dup = routed.numel() - torch.unique(routed).numel()
        msg = f"TileKernels' get_fused_mapping gave {dup} positions twice"
        if os.environ.get("TILEAOT_SANITIZE"):
            pytest.skip(msg + " (under compute-sanitizer)")
        pytest.fail(msg)
    q, sf = tileaot.per_token_cast_fp8(torch.randn(2048, 7168, device="cuda").bfloat16(), 128)
    for col in (False, True):
        got = tileaot.expand_to_fused_with_sf(q, sf, pos, pte, use_tma_aligned_col_major_sf=col)
        _check(q, sf, 128, pos, pte, col, got)


def test_launch_is_ordered_on_the_callers_stream():
    """The scales written on a side stream after a long sleep: a launch on any other stream
    would copy the zeros."""
    import tileaot

    x = torch.randn(4096, 7168, device="cuda").to(torch.float8_e4m3fn)
    src = _scales(4096, 7168, 128, "fp32")
    pte, pos = fused_mapping(_routing(4096, 8, 256), 256, 128)
    x_sf = torch.zeros_like(src)
    with behind_a_busy_stream():
        x_sf.copy_(src)
        got = tileaot.expand_to_fused_with_sf(x, x_sf, pos, pte)
    _check(x, src, 128, pos, pte, False, got)


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
