"""GPU tests of per_block_cast_lossless against kernels_py.quant.per_block_cast_lossless.reference
and TileKernels' kernel.

Every key (float32 or UE8M0 input scales x float32 or UE8M0 output scales) on odd sizes: 1, 7,
129 and 4001 rows, column counts that are no multiple of the output block, input blocks (1, 32),
(1, 16), (32, 32), (1, 8) (per-element scales in the cast) and output blocks (128, 128), (1,
128), (32, 64), (16, 8); every code byte (-0 included); float32 scales with mantissa bits (which
TileKernels ignores); exponent spreads of 11 (lossless) and past it (the formula's rounded value,
no TileKernels semantics). Outputs are poisoned (0xFF bytes, an e4m3 NaN; NaN / 0xFF scales)
before each call; q bytes and scales must be bit-exact. Also TileKernels' own kernel
(``tile_kernels.quant.per_block_cast_lossless``, JIT-compiled by TileLang) through
``tileaot.tile_kernels.quant.per_block_cast_lossless`` in each of its scale layouts, the
allocating call, stream order, and every variant built for this GPU exercised.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream, selected
from test_gpu_per_channel_cast_fused import _assert_same

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "per_block_cast_lossless"
F8, U8, F32 = torch.float8_e4m3fn, torch.uint8, torch.float32
KEYS = {"fp32,fp32": (F32, "fp32"), "fp32,u8": (F32, "ue8m0"), "u8,fp32": (U8, "fp32")}
KEYS["u8,u8"] = (U8, "ue8m0")
BLOCKS = [((1, 32), (128, 128)), ((1, 32), (1, 128)), ((1, 16), (32, 64)), ((32, 32), (128, 128))]
BLOCKS += [((1, 8), (16, 8))]
SHAPES = [(1, 96), (7, 416), (129, 7168), (4001, 288), (256, 32)]
SEEN: set[str] = set()


def _inputs(rows: int, n: int, in_block, key: str, spread: int = 11):
    from test_kernels_cpu_per_block_cast_lossless import inputs

    sf = "ue8m0" if KEYS[key][0] == U8 else "fp32"
    x, x_sf = inputs(rows, n, in_block, seed=rows * 7 + n, sf=sf, spread=spread)
    return x.cuda(), x_sf.cuda()


def _run(x, x_sf, in_block, out_block, key: str):
    import tileaot

    rows, n = x.shape[0], 2 * x.shape[1]
    fmt = KEYS[key][1]
    q = torch.full((rows, n), 0xFF, dtype=U8, device="cuda").view(F8)
    shape = (-(-rows // out_block[0]), -(-n // out_block[1]))
    if fmt == "fp32":
        scale = torch.full(shape, float("nan"), device="cuda")
    else:
        scale = torch.full(shape, 0xFF, dtype=U8, device="cuda")
    name = selected(OP, key, [tuple(x.shape), tuple(x_sf.shape), (rows, n), shape])
    SEEN.add(name)
    got = tileaot.per_block_cast_lossless(x, x_sf, *in_block, *out_block, fmt, out=(q, scale))
    assert got[0] is q and got[1] is scale
    torch.cuda.synchronize()
    return q, scale, name


def _reference(x, x_sf, in_block, out_block, fmt):
    from kernels_py.quant import per_block_cast_lossless as m

    q, scale = m.reference(x.cpu(), x_sf.cpu(), in_block, out_block, fmt)
    return q.cuda(), scale.cuda()


@pytest.mark.parametrize("spread", [11, 20], ids=["lossless", "lossy"])
@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("in_block, out_block", BLOCKS)
@pytest.mark.parametrize("rows, n", SHAPES)
def test_per_block_cast_lossless(rows, n, in_block, out_block, key, spread):
    x, x_sf = _inputs(rows, n, in_block, key, spread)
    q, scale, name = _run(x, x_sf, in_block, out_block, key)
    _assert_same((q, scale), _reference(x, x_sf, in_block, out_block, KEYS[key][1]), name)


def _tk_kernel():
    from _tile_kernels import tk

    tk()
    try:
        from tile_kernels.quant import per_block_cast_lossless
    except ImportError as e:  # pragma: no cover - depends on the machine
        pytest.skip(f"TileKernels' kernels do not import here ({e})")
    return per_block_cast_lossless


@pytest.mark.parametrize("flags", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("in_block, out_block", BLOCKS[:4])
@pytest.mark.parametrize("rows, n", [(7, 416), (129, 7168), (4001, 288)])
def test_matches_tilekernels_kernel(rows, n, in_block, out_block, flags):
    """TileKernels' kernel and the compat function, each scale layout TileKernels writes (its
    packed padding bytes, which some of its CTAs leave unwritten, are not compared)."""
    from tileaot.tile_kernels import quant

    theirs_fn = _tk_kernel()
    col, packed = flags
    x, e = _inputs(rows, n, in_block, "u8,u8")
    inputs = [(e.int() << 23).view(F32)]  # float32 scales
    if in_block[0] == 1:
        inputs.append(quant.tma_scales(e, True, True))  # packed UE8M0, column-major
    for x_sf in inputs:
        args = ("e4m3", in_block, out_block, col, False, packed)
        q_tk, sf_tk = theirs_fn((x.view(torch.int8), x_sf), *args)
        q, sf = quant.per_block_cast_lossless((x.view(torch.int8), x_sf), *args)
        torch.cuda.synchronize()
        assert torch.equal(q.view(U8), q_tk.view(U8))
        assert (sf.dtype, sf.shape, sf.stride()) == (sf_tk.dtype, sf_tk.shape, sf_tk.stride())
        if packed:
            groups = -(-n // out_block[1])
            a = sf.new_empty(sf.shape).copy_(sf).view(U8)[:, :groups]
            b = sf_tk.new_empty(sf_tk.shape).copy_(sf_tk).view(U8)[:, :groups]
            assert torch.equal(a, b)
        else:
            assert torch.equal(sf.view(torch.int32), sf_tk.view(torch.int32))


def test_allocating_call_matches_out_call():
    import tileaot

    x, x_sf = _inputs(300, 7168, (1, 32), "u8,fp32")
    q, scale = tileaot.per_block_cast_lossless(x, x_sf)
    assert q.dtype == F8 and scale.dtype == F32
    assert q.shape == (300, 7168) and scale.shape == (3, 56)
    _assert_same((q, scale), _reference(x, x_sf, (1, 32), (128, 128), "fp32"), "allocating call")


def test_launch_is_ordered_on_the_callers_stream():
    """x written on a side stream after a long sleep: a launch on any other stream would read
    the poisoned codes (0xFF: -6 everywhere)."""
    import tileaot

    x, x_sf = _inputs(4096, 7168, (1, 32), "u8,fp32")
    want = _reference(x, x_sf, (1, 32), (128, 128), "fp32")

    def check(got):
        return all(torch.equal(a.view(U8), b.view(U8)) for a, b in zip(got, want, strict=True))

    call = lambda xs: tileaot.per_block_cast_lossless(xs, x_sf)  # noqa: E731
    assert_ordered_on_callers_stream(call, check, x, poison=255)


def test_every_per_block_cast_lossless_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
