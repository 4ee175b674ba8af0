"""expand_to_fused on the CPU: our reference against a row-by-row loop and against TileKernels
1.0.0's (`tile_kernels.torch.expand_to_fused`), byte for byte, on mappings built as its
get_fused_mapping builds them (tests/_fused_mapping.py); the wrapper's checks, and lowering.
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, misaligned, refusals_test, t  # noqa: E402, F401
from _fused_mapping import fused_mapping  # noqa: E402
from _kernel_args import check_launch  # noqa: E402
from _lowering import default_arch_sources, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

m = importlib.import_module("kernels_py.moe.expand_to_fused")
op = importlib.import_module("tileaot.expand_to_fused").expand_to_fused

TOKENS = (0, 1, 7, 129, 4001)
DTYPES = (torch.bfloat16, torch.float8_e4m3fn)
SPECIAL = (0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-30, 3e38, -448.0)


def _x(tokens: int, h: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random rows with the special values planted: bytes to carry, NaN payloads included."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(tokens, h, generator=gen) * 100).to(dtype)
    flat = x.view(-1)
    n = min(len(SPECIAL), flat.numel())
    flat[:n] = torch.tensor(SPECIAL[:n]).to(dtype)
    if dtype == torch.bfloat16 and flat.numel() > n:
        flat.view(torch.int16)[n] = 0x7FC1  # a NaN with a payload
    return x


def _idx(tokens: int, k: int, e: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(-1, e, (tokens, k), generator=gen)
    if tokens > 3:
        idx[3] = -1  # a token routed nowhere
    return idx


def _loop(x, pos, pos_to_expert):
    """The definition, one row at a time (bytes)."""
    xb = x.view(torch.uint8)
    out = torch.full((pos_to_expert.shape[0], xb.shape[1]), 0x5A, dtype=torch.uint8)
    for p in range(pos_to_expert.shape[0]):
        if pos_to_expert[p] < 0:
            out[p] = 0
    for tok in range(pos.shape[0]):
        for j in range(pos.shape[1]):
            if pos[tok, j] >= 0:
                out[pos[tok, j]] = xb[tok]
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("k", "e", "align", "h"), [(8, 256, 128, 64), (1, 7, 1, 33), (9, 16, 16, 8)]
)
def test_reference_matches_tile_kernels_and_the_loop(dtype, k, e, align, h):
    ref = tk("expand_to_fused").expand_to_fused
    for i, tokens in enumerate(TOKENS):
        x = _x(tokens, h, dtype, i)
        idx = _idx(tokens, k, e, i)
        extra = 0 if i % 2 else 37  # rows past the last run (num_expanded_tokens given)
        total = len(fused_mapping(idx, e, align)[0])
        pos_to_expert, pos = fused_mapping(idx, e, align, total + extra)
        ours = m.reference(x, pos, pos_to_expert)
        assert ours.dtype == dtype and ours.shape == (total + extra, h)
        theirs = ref(x.view(torch.uint8), pos.long(), pos_to_expert)  # fp8 index_put: bytes
        assert torch.equal(ours.view(torch.uint8), theirs), (tokens, k, e)
        if tokens <= 129:
            assert torch.equal(ours.view(torch.uint8), _loop(x, pos, pos_to_expert)), tokens


def test_reference_skips_positions_outside_the_rows():
    x = torch.arange(6, dtype=torch.bfloat16).view(3, 2)
    pos = torch.tensor([[0, 9], [-1, 1], [-5, 2]], dtype=torch.int32)
    out = m.reference(x, pos, torch.tensor([0, 0, 1, -1], dtype=torch.int32))
    assert out.tolist() == [[0, 1], [2, 3], [4, 5], [0, 0]]


def i32(*shape):
    return t(*shape, dtype=torch.int32)


def test_launch_arguments(fake, cpu_as_cuda):
    x, pos, pte = t(5, 64), i32(5, 8), i32(48)
    y = op(x, pos, pte)
    assert y.shape == (48, 64) and y.dtype == torch.bfloat16
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("expand_to_fused", "bf16")
    check_launch(launch, "expand_to_fused", x=x, token_topk_to_pos=pos, pos_to_expert=pte, out=y)
    assert launch.scalars == ()
    x8 = t(3, 128, dtype=torch.float8_e4m3fn)
    y8 = torch.empty(10, 128, dtype=torch.float8_e4m3fn)
    assert op(x8, i32(3, 2), i32(10), out=y8) is y8
    assert fake.by_handle[fake.launches[-1].handle] == ("expand_to_fused", "e4m3")


def test_nothing_routed_zeroes_without_a_launch(fake, cpu_as_cuda):
    """T == 0 or K == 0: every row of a valid mapping is padding (an empty input has no data
    pointer to pass); P == 0: nothing to write."""
    for x, pos in ((t(0, 64), i32(0, 8)), (t(4, 64), i32(4, 0))):
        y = torch.full((6, 64), 7.0, dtype=torch.bfloat16)
        assert op(x, pos, i32(6), out=y) is y and not y.any()
    assert op(t(4, 64), i32(4, 2), i32(0)).shape == (0, 64)
    assert fake.launches == []


BAD = [
    (lambda: op(t(3, 64, dtype=torch.float32), i32(3, 2), i32(8)), TypeError, r"x"),
    (lambda: op(t(3, 64), t(3, 2, dtype=torch.int64), i32(8)), TypeError, r"token_topk_to_pos"),
    (lambda: op(t(3, 64), i32(3, 2), t(8, dtype=torch.int64)), TypeError, r"pos_to_expert"),
    (lambda: op(t(3, 64), i32(4, 2), i32(8)), ValueError, r"token_topk_to_pos"),
    (lambda: op(t(3, 64), i32(3, 2), i32(8, 1)), ValueError, r"pos_to_expert"),
    (lambda: op(t(192), i32(3, 2), i32(8)), ValueError, r"x"),
    (lambda: op(misaligned(3, 64), i32(3, 2), i32(8)), ValueError, r"x"),
    (lambda: op(t(3, 64), i32(3, 2), i32(8), out=t(7, 64)), ValueError, r"out"),
    (
        lambda: op(t(3, 64), i32(3, 2), i32(8), out=t(8, 64, dtype=torch.float8_e4m3fn)),
        TypeError,
        r"out",
    ),
]


test_bad_calls_raise_before_any_launch = refusals_test(BAD)


@needs_tilelang
def test_lowers_for_every_default_arch():
    """Both keys on each default arch: the 16-byte path through the hinted store on CUDA, and
    the scalar path for rows of other lengths."""
    load = {"bfloat16": "*(uint4*)(frag", "float8_e4m3fn": "*(fp8_e4_16_t*)(frag"}  # 16 bytes
    for dtype in m.DTYPES:
        for arch, src in default_arch_sources(m.factory, "etf", dtype=dtype):
            assert "tileaot_store_stream" in src and load[dtype] in src, (arch, dtype)
