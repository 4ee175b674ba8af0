"""per_block_cast_lossless on the CPU. TileKernels 1.0.0 has no torch reference of it (its
reference is the kernel, tile_kernels/quant/per_block_cast_lossless_kernel.py), so our
reference is checked against two oracles written here: `tk_kernel_oracle`, TileKernels' kernel
replayed CTA by CTA as its source states it (its tile sizes, the per-tile bound on which input
scales count, the uint32 exponent arithmetic, which output scale bytes each CTA stores), and
`_exact_values`, the documented semantics in float64 (``e2m1 * 2^(e - 127)`` in, ``q * 2^(E -
127)`` out: equal wherever the block's exponents span at most 11). Inputs: 1, 7, 129 rows;
several column counts; every code (-0 included); float32 scales with and without mantissa
bits, zero and negative scales; UE8M0 bytes from 0 to 255; block sizes (1, 32) -> (128, 128),
(1, 128), (32, 64); (1, 16) -> (1, 16); (32, 32) -> (128, 128); (1, 8) -> (16, 8). Then the
KernelSpec, the wrapper's launch and checks, and lowering (needs tilelang, no GPU)."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, misaligned, refusals_test, t  # noqa: E402, F401
from _kernel_args import check_launch  # noqa: E402
from _lowering import default_arch_sources, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402
from test_parity_quant import _same  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

m = importlib.import_module("kernels_py.quant.per_block_cast_lossless")
op = importlib.import_module("tileaot.per_block_cast_lossless").per_block_cast_lossless
U8, F32, F8 = torch.uint8, torch.float32, torch.float8_e4m3fn
TOKENS = (1, 7, 129)
# (x_block_size, out_block_size, columns)
BLOCKS = [
    ((1, 32), (128, 128), (96, 256, 416)),
    ((1, 32), (1, 128), (160, 512)),
    ((1, 32), (32, 64), (96,)),
    ((1, 16), (1, 16), (64,)),
    ((32, 32), (128, 128), (288,)),
    ((1, 8), (16, 8), (32,)),
]
CASES = [(i, o, n) for i, o, ns in BLOCKS for n in ns]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def inputs(rows: int, n: int, in_block, seed: int, sf: str, spread: int = 11):
    """Packed codes (every byte value) and scales whose exponents span at most `spread` per
    output block when spread <= 11: float32 powers of two (some with mantissa bits, which the
    cast ignores) or UE8M0 bytes; a few zero scales."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (rows, n // 2), generator=g, dtype=torch.int32).to(U8)
    shape = (cdiv(rows, in_block[0]), cdiv(n, in_block[1]))
    base = int(torch.randint(20, 220, (1,), generator=g))
    e = base + torch.randint(0, spread + 1, shape, generator=g)
    if sf == "ue8m0":
        return x, e.to(U8)
    mant = torch.randint(0, 1 << 23, shape, generator=g) * (torch.rand(shape, generator=g) < 0.3)
    bits = (e << 23) | mant
    return x, m._float_of_bits(bits)


def _tk_values(x):
    """float64 E2M1 values of packed codes, by TileKernels' own decoder
    (`tile_kernels.quant.common.unpack_from_e2m1fn_x2`)."""
    tk()
    common = importlib.import_module("tile_kernels.quant.common")
    return common.unpack_from_e2m1fn_x2(x).double()


def tk_kernel_oracle(x, e_in, in_block, out_block):
    """TileKernels' kernel, CTA by CTA: ``(q float32 values before the e4m3 cast, E [MO, KO],
    written)`` where `written` marks the exponent slots (in the packed UE8M0 layout's logical
    ``[MO, 4 * ceil(KO / 4)]``) some CTA stores. `e_in`: int64 exponents (bits >> 23)."""
    (im, ik), (om, ok) = in_block, out_block
    rows, n = x.shape[0], 2 * x.shape[1]
    mo, ko = cdiv(rows, om), cdiv(n, ok)
    block_m = max(om, 32)
    block_k = max(ok, 8192 // block_m)
    vals = _tk_values(x)
    q = torch.zeros(rows, n, dtype=torch.float64)
    big_all = torch.full((mo, 4 * cdiv(ko, 4)), -1, dtype=torch.int64)
    nim, nik, nom, nok = block_m // im, block_k // ik, block_m // om, block_k // ok
    pm, pk = om // im, ok // ik
    for bt in range(cdiv(rows, block_m)):
        for bh in range(cdiv(n, block_k)):
            sf = torch.zeros(nim, nik, dtype=torch.int64)
            valid = torch.zeros(nim, nik, dtype=torch.bool)
            for i in range(nim):
                for j in range(nik):
                    if i * im + bt * block_m < rows and j * ik + bh * block_k < n:
                        sf[i, j] = e_in[bt * block_m // im + i, bh * block_k // ik + j]
                        valid[i, j] = True
            big = sf.view(nom, pm, nok, pk).amax(dim=(1, 3))
            big = torch.where(big >= 6, big - 6, 0)
            new = (sf - big.repeat_interleave(pm, 0).repeat_interleave(pk, 1) + 127) & 0xFFFFFFFF
            mult = m._float_of_bits((new << 23) & 0xFFFFFFFF).double()
            r0, c0 = bt * block_m, bh * block_k
            r1, c1 = min(r0 + block_m, rows), min(c0 + block_k, n)
            full = mult.repeat_interleave(im, 0).repeat_interleave(ik, 1)
            q[r0:r1, c0:c1] = vals[r0:r1, c0:c1] * full[: r1 - r0, : c1 - c0]
            # store_sf: inside the scale tensor's declared shape (packed: [ceil(KO/4), MO*4]).
            for i in range(nom):
                for j in range(nok):
                    sm, sk = bt * nom + i, bh * nok + j
                    if sm < mo and sk < 4 * cdiv(ko, 4):
                        big_all[sm, sk] = big[i, j]
    return q, big_all[:, :ko], big_all


def _exact_values(x, x_sf, in_block):
    """float64 ``e2m1(code) * 2^(e - 127)``, TileKernels' reading of each input element."""
    e = m._exponents(x_sf).double()
    rows, n = x.shape[0], 2 * x.shape[1]
    vals = _tk_values(x)
    s = torch.exp2(e - 127).repeat_interleave(in_block[0], 0)[:rows]
    return vals * s.repeat_interleave(in_block[1], 1)[:, :n]


@pytest.mark.parametrize("sf", ["fp32", "ue8m0"])
@pytest.mark.parametrize("in_block, out_block, n", CASES)
@pytest.mark.parametrize("rows", TOKENS)
def test_reference_is_tile_kernels_kernel(rows, in_block, out_block, n, sf):
    x, x_sf = inputs(rows, n, in_block, seed=rows * 1000 + n, sf=sf)
    for fmt in ("fp32", "ue8m0"):
        q, scale = m.reference(x, x_sf, in_block, out_block, fmt)
        want_q, big, _ = tk_kernel_oracle(x, m._exponents(x_sf), in_block, out_block)
        _same(q, want_q.float().to(F8), f"q {fmt}")
        assert q.view(U8).eq(want_q.float().to(F8).view(U8)).all()
        _same(m._exponents(scale), big, f"scale {fmt}")
        if fmt == "fp32":
            assert scale.dtype == F32 and scale.shape == big.shape
        else:
            assert scale.dtype == U8
    # Lossless: q * scale is the input value, exactly.
    value = _exact_values(x, x_sf, in_block)
    sc = torch.exp2(big.double() - 127).repeat_interleave(out_block[0], 0)[:rows]
    sc = sc.repeat_interleave(out_block[1], 1)[:, :n]
    assert torch.equal(q.double() * sc, value), "not lossless"


def test_corner_scales():
    """Zero, negative, NaN/inf-exponent and -0.0 scales, all-small exponents (E saturates
    to 0: a 0.0 float32 scale), and spreads past 11 (lossy: the formula, rounded and
    saturated): the reference still replays TileKernels' arithmetic."""
    in_block, out_block = (1, 32), (1, 64)
    x = torch.arange(256, dtype=torch.int32).to(U8).repeat(3, 1)[:, :64]  # [3, 64]: N = 128
    cases = {
        "small": torch.tensor([[0.0, 2.0**-126, 2.0**-125, 2.0**-122]] * 3),
        "neg": torch.tensor([[-1.0, -2.0, -0.5, -4.0], [-0.0, -0.0, 1.0, 2.0], [1.0] * 4]),
        "inf": torch.tensor([[float("inf"), 2.0**127, 2.0**126, 2.0**122]] * 3),
        "lossy": torch.tensor([[1.0, 2.0**-12, 2.0**-20, 2.0**20]] * 3),
    }
    for name, sf in cases.items():
        q, scale = m.reference(x, sf, in_block, out_block)
        want_q, big, _ = tk_kernel_oracle(x, m._exponents(sf), in_block, out_block)
        want = want_q.float().clamp(-448, 448).to(F8)
        _same(q, want, name)
        _same(m._exponents(scale), big, name)
    q, scale = m.reference(x, cases["small"], in_block, out_block)
    assert scale.eq(0).all()  # max exponent <= 6: E = 0, the float32 0.0


def test_packed_bytes_tile_kernels_writes_are_ours():
    """Which padding exponent slots TileKernels' CTAs store (packed UE8M0 layout) and that
    they hold 0, the value tileaot.tile_kernels writes there."""
    for in_block, out_block, n in [((1, 32), (1, 32), 96), ((1, 32), (32, 32), 160)]:
        x, sf = inputs(33, n, in_block, seed=n, sf="ue8m0")
        _, big, full = tk_kernel_oracle(x, m._exponents(sf), in_block, out_block)
        pad = full[:, big.shape[1] :]
        assert pad.eq(0).all() or pad.eq(-1).all(), pad


def test_spec_tables():
    keys = [m.SPEC.key_string(k) for k in m.SPEC.keys]
    assert keys == ["fp32,fp32", "fp32,u8", "u8,fp32", "u8,u8"]
    with pytest.raises(ValueError, match="unsupported key"):
        m.factory(arch="sm_90a", sf_in="int32", sf_out="float32")


@pytest.mark.parametrize("sf_in", [F32, U8])
@pytest.mark.parametrize("fmt", ["fp32", "ue8m0"])
def test_launch_arguments(fake, cpu_as_cuda, sf_in, fmt):
    x, sf = u8(130, 96), t(130, 6, dtype=F32).to(sf_in)  # N = 192
    q, s = op(x, sf, 1, 32, 128, 64, fmt)
    out_dtype = F32 if fmt == "fp32" else U8
    assert (q.shape, q.dtype, s.shape, s.dtype) == ((130, 192), F8, (2, 3), out_dtype)
    (launch,) = fake.launches
    key = ("fp32" if sf_in == F32 else "u8") + ("," + ("fp32" if fmt == "fp32" else "u8"))
    assert fake.by_handle[launch.handle] == ("per_block_cast_lossless", key)
    check_launch(launch, "per_block_cast_lossless", x=x, x_sf=sf, q=q, scale=s)
    assert launch.scalars == (1.0, 5.0, 128.0, 6.0)


def test_no_output_elements_without_a_launch(fake, cpu_as_cuda):
    q, s = op(u8(0, 64), t(0, 4, dtype=F32))
    assert q.shape == (0, 128) and s.shape == (0, 1)
    assert fake.launches == []


def u8(*shape: int) -> torch.Tensor:
    return torch.randint(0, 256, shape, dtype=torch.int32).to(U8)


def _call(x_shape=(4, 64), sf_shape=(4, 4), sf_dtype=F32, **kw):
    return op(u8(*x_shape), t(*sf_shape, dtype=F32).to(sf_dtype), **kw)


BAD = [
    (lambda: op(t(4, 64, dtype=torch.int8), t(4, 4, dtype=F32)), TypeError, r"x"),
    (lambda: _call(sf_dtype=torch.bfloat16), TypeError, r"x_sf"),
    (
        lambda: _call(sf_shape=(4, 3)),
        ValueError,
        r"x_sf has shape \(4, 3\); x of 4 rows .* needs \(4, 4\)",
    ),
    (lambda: _call(x_shape=(4, 40), sf_shape=(4, 3)), ValueError, r"N % 32 == 0"),
    (lambda: _call(x_block_k=24), ValueError, r"x_block_k must be a power of two"),
    (lambda: _call(block_k=96), ValueError, r"block_k must be a power of two"),
    (lambda: _call(block_k=16), ValueError, r"block_k=16 must be a multiple of x_block_k=32"),
    (lambda: _call(x_block_m=3), ValueError, r"block_m=128 must be a multiple of x_block_m=3"),
    (lambda: _call(block_m=0), ValueError, r"block_m must be positive"),
    (lambda: _call(block_m=1.0), TypeError, r"block_m must be an int"),
    (lambda: _call(scale_format="e4m3"), ValueError, r"scale_format must be 'fp32' or"),
    (lambda: _call(scale_format=1), TypeError, r"scale_format must be a str"),
    (lambda: op(misaligned(4, 64, dtype=U8), t(4, 4, dtype=F32)), ValueError, r"x"),
    (lambda: _call(out=(t(4, 128, dtype=F8), u8(1, 1))), TypeError, r"out"),
]


test_bad_calls_raise_before_any_launch = refusals_test(BAD)


@needs_tilelang
def test_lowers_for_every_default_arch():
    """Each key on each default arch: the warp max, the scale store, the vector fp8 cast."""
    for key in m.SPEC.keys:
        for arch, src in default_arch_sources(m.factory, "pbcl", **key):
            assert "warp_reduce_max" in src and "__nv_cvt_float2_to_fp8x2" in src, arch
