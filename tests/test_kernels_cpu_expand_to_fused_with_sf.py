"""expand_to_fused_with_sf on the CPU: our reference against a row-by-row loop and against
TileKernels 1.0.0's (`tile_kernels.torch.expand_to_fused.expand_to_fused_with_sf`), byte for
byte and for every scale layout it takes (float32 row-major and column-major, packed int32
column-major: dtype, shape, strides and the zero-padded buffer behind the column-major view),
on mappings built as its get_fused_mapping builds them; the wrapper's checks, and lowering.
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
from test_kernels_cpu_expand_to_fused import TOKENS, _idx, _loop, _x  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

m = importlib.import_module("kernels_py.moe.expand_to_fused_with_sf")
op = importlib.import_module("tileaot.expand_to_fused_with_sf").expand_to_fused_with_sf
F8, F32, I32 = torch.float8_e4m3fn, torch.float32, torch.int32
# (scale dtype, column-major): the layouts TileKernels' expand_to_fused_with_sf takes
LAYOUTS = [(F32, False), (F32, True), (I32, True)]


def _sf(tokens: int, h: int, n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Scale rows for H columns in groups of n: float32 with NaN / -0.0 planted, or int32
    packed UE8M0 words (any bits)."""
    groups = -(-h // n)
    gen = torch.Generator().manual_seed(seed)
    if dtype == I32:
        shape = (tokens, -(-groups // 4))
        return torch.randint(-(2**31), 2**31 - 1, shape, generator=gen, dtype=I32)
    sf = torch.rand(tokens, groups, generator=gen)
    sf.view(-1)[:2] = torch.tensor([float("nan"), -0.0])[: sf.numel()]
    return sf


def _buffer(view: torch.Tensor, columns: int) -> torch.Tensor:
    """The row-major [F, columns] storage behind TileKernels' column-major [P, F] view."""
    return torch.as_strided(view, (view.shape[1], columns), (columns, 1))


@pytest.mark.parametrize(("sf_dtype", "col"), LAYOUTS, ids=["fp32-row", "fp32-col", "i32-col"])
@pytest.mark.parametrize(
    ("k", "e", "align", "h", "n"), [(8, 256, 128, 512, 128), (1, 7, 1, 40, 32), (9, 16, 16, 64, 32)]
)
def test_reference_matches_tile_kernels_and_the_loop(sf_dtype, col, k, e, align, h, n):
    ref = tk("expand_to_fused").expand_to_fused_with_sf
    for i, tokens in enumerate(TOKENS):
        x, sf = _x(tokens, h, F8, i), _sf(tokens, h, n, sf_dtype, i)
        idx = _idx(tokens, k, e, i)
        extra = 0 if i % 2 else 37 + i  # rows past the last run; P % 4 takes every value
        total = len(fused_mapping(idx, e, align)[0])
        pos_to_expert, pos = fused_mapping(idx, e, align, total + extra)
        rows = total + extra
        out, out_sf = m.reference(x, sf, pos, pos_to_expert, "col" if col else "row")
        theirs, theirs_sf = ref((x.view(torch.uint8), sf), n, pos.long(), pos_to_expert, col)
        assert torch.equal(out.view(torch.uint8), theirs), (tokens, k, e)
        assert out_sf.dtype == theirs_sf.dtype == sf_dtype
        if col:
            assert out_sf.shape == (sf.shape[1], m.padded_columns(rows))
            view = out_sf[:, :rows].T
            assert (view.shape, view.stride()) == (theirs_sf.shape, theirs_sf.stride())
            theirs_sf = _buffer(theirs_sf, out_sf.shape[1])
        assert torch.equal(out_sf.view(I32), theirs_sf.view(I32)), (tokens, k, e)
        if tokens <= 129:
            assert torch.equal(out.view(torch.uint8), _loop(x, pos, pos_to_expert))
            sf_rows = out_sf[:, :rows].T if col else out_sf
            assert torch.equal(sf_rows.view(I32), _loop(sf, pos, pos_to_expert).view(I32))


def test_spec_tables():
    spec = m.SPEC
    assert [spec.key_string(k) for k in spec.keys] == [
        "e4m3,fp32,row",
        "e4m3,fp32,col",
        "e4m3,i32,row",
        "e4m3,i32,col",
    ]
    assert [m.padded_columns(p) for p in (0, 1, 4, 5, 8)] == [0, 4, 4, 8, 8]
    with pytest.raises(ValueError, match="unsupported key"):
        m.factory(arch="sm_90a", dtype="bfloat16", sf_dtype="float32", layout="row")


def i32(*shape):
    return t(*shape, dtype=I32)


def f8(*shape):
    return t(*shape, dtype=F8)


@pytest.mark.parametrize(
    ("sf_dtype", "col"), [(F32, False), (F32, True), (I32, False), (I32, True)]
)
def test_launch_arguments(fake, cpu_as_cuda, sf_dtype, col):
    x, sf, pos, pte = f8(5, 256), t(5, 2, dtype=sf_dtype), i32(5, 8), i32(47)
    y, y_sf = op(x, sf, pos, pte, use_tma_aligned_col_major_sf=col)
    assert (y.shape, y.dtype, y_sf.dtype) == ((47, 256), F8, sf_dtype)
    assert y_sf.shape == ((2, 48) if col else (47, 2))
    (launch,) = fake.launches
    key = f"e4m3,{'fp32' if sf_dtype == F32 else 'i32'},{'col' if col else 'row'}"
    assert fake.by_handle[launch.handle] == ("expand_to_fused_with_sf", key)
    tensors = {"x": x, "x_sf": sf, "token_topk_to_pos": pos, "pos_to_expert": pte}
    check_launch(launch, "expand_to_fused_with_sf", **tensors, out=y, out_sf=y_sf)
    assert launch.scalars == ()


def test_nothing_routed_zeroes_without_a_launch(fake, cpu_as_cuda):
    for x, sf, pos in ((f8(0, 64), t(0, 1, dtype=F32), i32(0, 8)), (f8(4, 64), t(4, 1), i32(4, 0))):
        y, y_sf = torch.full((6, 64), 7.0).to(F8), torch.full((1, 8), 7.0)
        sf = sf.float()
        got = op(x, sf, pos, i32(6), use_tma_aligned_col_major_sf=True, out=(y, y_sf))
        assert got[0] is y and got[1] is y_sf and not y.float().any() and not y_sf.any()
    assert op(f8(4, 64), t(4, 1, dtype=F32), i32(4, 2), i32(0))[1].shape == (0, 1)
    assert fake.launches == []


BAD = [
    (lambda: op(t(3, 64), t(3, 1, dtype=F32), i32(3, 2), i32(8)), TypeError, r"x"),
    (lambda: op(f8(3, 64), t(3, 1), i32(3, 2), i32(8)), TypeError, r"x_sf"),
    (lambda: op(f8(3, 64), t(4, 1, dtype=F32), i32(3, 2), i32(8)), ValueError, r"x_sf"),
    (lambda: op(f8(3, 64), t(3, 0, dtype=F32), i32(3, 2), i32(8)), ValueError, r"x_sf 0 col"),
    (lambda: op(f8(3, 0), t(3, 1, dtype=F32), i32(3, 2), i32(8)), ValueError, r"x has 0 and"),
    (
        lambda: op(
            f8(3, 64), t(3, 1, dtype=F32), i32(3, 2), i32(8), use_tma_aligned_col_major_sf=1
        ),
        TypeError,
        r"use_tma_aligned_col_major_sf must be True or False",
    ),
    (lambda: op(f8(3, 64), misaligned(3, 4, dtype=F32), i32(3, 2), i32(8)), ValueError, r"x_sf"),
    (
        lambda: op(
            f8(3, 64), t(3, 2, dtype=F32), i32(3, 2), i32(8), out=(f8(8, 64), t(2, 8, dtype=F32))
        ),
        ValueError,
        r"out",
    ),
]


test_bad_calls_raise_before_any_launch = refusals_test(BAD)


@needs_tilelang
def test_lowers_for_every_default_arch():
    """Each key on each default arch: the data through expand_to_fused's hinted 16-byte
    stores, the scales by 4-byte moves."""
    for key in m.SPEC.keys:
        for arch, src in default_arch_sources(m.factory, "etfsf", **key):
            assert "tileaot_store_stream" in src and "*(fp8_e4_16_t*)(frag" in src, (arch, key)
            assert "out_sf[" in src and "x_sf[" in src, (arch, key)
