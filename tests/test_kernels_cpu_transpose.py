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


def test_tiles_are_128_byte_rows_and_4_vectors_per_thread():
    for dtype, size in tp.ITEMSIZE.items():
        tc = tp.ROW_BYTES // size
        tr = tp.TILE_R[size]
        threads = tr * tp.CHUNKS_PER_ROW // tp.LOADS
        assert tc * size == 128 and tr * size >= 128, dtype  # whole 128-byte rows both ways
        assert threads in (128, 256) and tr * tc * size // 16 == tp.LOADS * threads, dtype


@needs_tilelang
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_lower_bf16_moves_16_byte_vectors_through_a_swizzled_tile(arch):
    src = lower_source(tp.factory(arch=arch, dtype="bfloat16"), arch, "transpose_test")
    assert "if (((R % 8) == 0) & ((C % 8) == 0))" in src  # the vector path's runtime branch
    assert src.count("*(uint4*)(x + ") == 1 and src.count("*(uint4*)(y + ") == 1
    assert "^" in src  # the XOR swizzle
    assert "longlong4" not in src and "ulonglong4" not in src  # never 32-byte accesses
    assert "blockIdx.z" in src and " / " not in src.split('extern "C"')[-1]  # no division
