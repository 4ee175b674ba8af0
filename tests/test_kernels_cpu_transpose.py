"""CPU tests of kernels_py/layout/transpose.py: the reference against an independent
element-by-element transpose (bit-exact, fp8 NaN bytes included), the KernelSpec table, and
lowering smoke tests (skipped without tilelang)."""

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.layout import transpose as tp  # noqa: E402


def _bits(x):
    """The tensor's bytes as an integer tensor of the same width (bit patterns compared)."""
    return x.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[x.element_size()])


@pytest.mark.parametrize(
    "dtype", [torch.float8_e4m3fn, torch.bfloat16, torch.float16, torch.float32, torch.int32]
)
@pytest.mark.parametrize("shape", [(1, 1), (7, 300), (64, 64), (3, 130, 67), (2, 1, 5)])
def test_reference_is_the_elementwise_transpose(dtype, shape):
    torch.manual_seed(0)
    x = torch.randint(0, 256, (*shape[:-2], shape[-2], shape[-1] * dtype.itemsize))
    x = x.to(torch.uint8).view(dtype)  # every bit pattern, NaNs and infs included
    y = tp.reference(x)
    assert y.shape == (*shape[:-2], shape[-1], shape[-2]) and y.is_contiguous()
    xb, yb = _bits(x).reshape(-1, *shape[-2:]), _bits(y).reshape(-1, shape[-1], shape[-2])
    for b in range(xb.shape[0]):
        for r in range(shape[-2]):
            for c in range(shape[-1]):
                assert yb[b, c, r].item() == xb[b, r, c].item()


def test_spec_table():
    spec = tp.SPEC
    assert spec.op == "transpose"
    names = [spec.variant_name(k, s) for k in spec.keys for s in spec.specs]
    assert names == [
        "transpose_e4m3_any",
        "transpose_bf16_any",
        "transpose_fp16_any",
        "transpose_fp32_any",
    ]
    assert [spec.key_string(k) for k in spec.keys] == ["e4m3", "bf16", "fp16", "fp32"]
    assert all(spec.supports(a, k, {}) for a in ("sm_70", "sm_90a", "sm_100a") for k in spec.keys)
    with pytest.raises(ValueError, match="unsupported dtype"):
        tp.factory(arch="sm_90a", dtype="int64")


def test_tiles_are_256_byte_rows_on_the_vector_path_and_128_on_the_scalar_path():
    for dtype, size in tp.ITEMSIZE.items():
        tr = tp.TILE_R[size]
        paths = ((tp.ROW_BYTES, tp.LOADS), (tp.SCALAR_ROW_BYTES, tp.SCALAR_LOADS))
        threads = {tr * row_bytes // 16 // loads for row_bytes, loads in paths}
        assert len(threads) == 1 and threads <= {128, 256}, dtype  # one block shape
        assert tr * size >= 128, dtype  # whole 128-byte output row segments
    assert (tp.ROW_BYTES, tp.LOADS, tp.SCALAR_ROW_BYTES, tp.SCALAR_LOADS) == (256, 8, 128, 4)


@pytest.mark.parametrize("chunks", [8, 16, 32])
def test_each_warp_covers_4_rows_by_8_chunks(chunks):
    """The scatter into the swizzled tile is free of bank conflicts only if each warp's 32
    vectors are 4 consecutive rows x 8 chunks with distinct chunk % 8 (and the lanes map the
    whole tile once)."""
    rows = 64
    seen = set()
    for warp in range(rows * chunks // 32):
        cells = [tp.place(32 * warp + lane, chunks) for lane in range(32)]
        seen.update(cells)
        row_set = sorted({r for r, _ in cells})
        assert len(row_set) == 4 and row_set[0] % 4 == 0 and row_set[-1] == row_set[0] + 3
        for r in row_set:
            assert sorted(ch % 8 for rr, ch in cells if rr == r) == list(range(8))
            assert len({ch // 8 for rr, ch in cells if rr == r}) == 1  # one 128-byte line
    assert seen == {(r, ch) for r in range(rows) for ch in range(chunks)}


@needs_tilelang
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_lower_bf16_moves_16_byte_vectors_through_a_swizzled_tile(arch):
    src = lower_source(tp.factory(arch=arch, dtype="bfloat16"), arch, "transpose_test")
    assert "if (((R % 8) == 0) & ((C % 8) == 0))" in src  # the vector path's runtime branch
    assert src.count("*(uint4*)(x + ") == 1 and src.count("*(uint4*)(y + ") == 1
    assert "^" in src  # the XOR swizzle
    assert "longlong4" not in src and "ulonglong4" not in src  # never 32-byte accesses
    assert "blockIdx.z" in src and " / " not in src.split('extern "C"')[-1]  # no division
