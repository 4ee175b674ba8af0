"""GPU tests of per_token_cast_fp4 against kernels_py.quant.per_token_cast_fp4.reference.

Every dtype x group size x scale format, on sizes that leave partial blocks at the end of
the flat tensor, a 3-D input, and data that hits every rounding case: random rows spread over
twelve decades (tiny groups, e4m3 groups that saturate), exact E2M1 ties at random scales,
all-zero groups, -0.0, small negatives (code 0x8), subnormal inputs and, for float32, values
near the float32 maximum. The outputs are poisoned twice (0xFF, then 0x00 bytes) so an
unwritten byte fails either way; codes and scales must be bit-exact. One case sits just below
the int32 element limit (checked on its first and last rows). The last test checks that every
per_token_cast_fp4 variant built for this GPU was exercised.
"""

from __future__ import annotations

import importlib

import pytest
from _gpu_helpers import assert_every_variant_exercised, selected

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "per_token_cast_fp4"
SEEN: set[str] = set()
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
SHAPES = [(1, 2048), (37, 4096), (129, 7168), (3, 32), (1000, 160), (7, 224), (4097, 96)]
SHAPES_G16 = [(2, 16), (5, 48), (33, 272)]


def _ref():
    return importlib.import_module("kernels_py.quant.per_token_cast_fp4")


def _cast():
    return importlib.import_module("tileaot.per_token_cast_fp4").per_token_cast_fp4


def _data(m: int, n: int, g: int, fmt: str, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    mag = torch.logspace(-6, 6 if dtype is not torch.float16 else 4, m, device="cuda")
    x = (
        torch.randn(m, n, device="cuda", generator=gen)
        * mag[torch.randperm(m, device="cuda")][:, None]
    )
    # Exact ties: E2M1 values and midpoints times a scale, in every other group of a row.
    if fmt == "ue8m0":
        s = 2.0 ** torch.randint(-10, 10, (m, n // g, 1), device="cuda", generator=gen).float()
    else:
        vals = _ref().e4m3_values().cuda()
        s = vals[torch.randint(20, 110, (m, n // g, 1), device="cuda", generator=gen)]
    grid = torch.tensor([*E2M1, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], device="cuda")
    pick = torch.randint(0, len(grid), (m, n // g, g), device="cuda", generator=gen)
    sign = torch.where(torch.rand(m, n // g, g, device="cuda", generator=gen) < 0.5, -1.0, 1.0)
    tied = grid[pick] * sign
    tied[..., 0] = 6.0  # the group's amax is 6 s, so the scale is s and the ties stay ties
    tied = (tied * s).reshape(m, n)
    cols = (torch.arange(n, device="cuda") // g) % 2 == 1
    x = torch.where(cols, tied, x)
    x[0, :g] = 0  # a zero group
    x[-1, :g] = -0.0
    if n >= 3 * g:  # small negatives next to a large value: they round to zero, keep the sign
        x[-1, 2 * g : 3 * g] = torch.randn(g, device="cuda", generator=gen) * 1e-4
        x[-1, 2 * g] = 1.0
    if dtype is not torch.float16:
        x[m // 2, :g] = torch.randn(g, device="cuda", generator=gen) * 1e-39  # subnormal
    if dtype is torch.float32:
        big = torch.randn(g, device="cuda", generator=gen).clamp(-3, 3) * 1e38
        x[m // 3, :g] = big
        x[m // 3, 0] = 3e38  # e = 253: 1 / (2 scale) is a subnormal float32
    return x.to(dtype)


def _check(x: torch.Tensor, g: int, fmt: str, key: str) -> None:
    cast = _cast()
    m, n = x.reshape(-1, x.shape[-1]).shape
    name = selected(OP, key, [(m, n), (m, n // 2), (m, n // g)])
    SEEN.add(name)
    q_ref, s_ref = _ref().reference(x.reshape(m, n), g, fmt)
    sdt = torch.uint8 if fmt == "ue8m0" else torch.float8_e4m3fn
    for poison in (0xFF, 0x00):
        q = torch.full((*x.shape[:-1], n // 2), poison, dtype=torch.uint8, device="cuda")
        s = torch.full((*x.shape[:-1], n // g), poison, dtype=torch.uint8, device="cuda")
        got = cast(x, g, fmt, out=(q, s.view(sdt)))
        torch.cuda.synchronize()
        assert got[0] is q and got[1].data_ptr() == s.data_ptr()
        bad_s = (s.reshape(m, -1) != s_ref.view(torch.uint8)).sum().item()
        assert bad_s == 0, f"{name}: {bad_s} scales differ (poison {poison:#x})"
        bad_q = (q.reshape(m, -1) != q_ref).sum().item()
        assert bad_q == 0, f"{name}: {bad_q} code bytes differ (poison {poison:#x})"


@pytest.mark.parametrize("fmt", ["ue8m0", "e4m3"])
@pytest.mark.parametrize("key", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize(
    ("m", "n", "g"), [(m, n, 32) for m, n in SHAPES] + [(m, n, 16) for m, n in SHAPES + SHAPES_G16]
)
def test_per_token_cast_fp4(key, m, n, g, fmt):
    x = _data(m, n, g, fmt, DTYPES[key], seed=m * 7919 + n)
    _check(x, g, fmt, f"{key},g{g},{fmt}")


@pytest.mark.parametrize(("g", "fmt"), [(32, "ue8m0"), (16, "e4m3")])
def test_leading_dims_and_allocation(g, fmt):
    x = _data(24, 256, g, fmt, torch.bfloat16, seed=5).reshape(2, 12, 256)
    _check(x, g, fmt, f"bf16,g{g},{fmt}")
    q, s = _cast()(x, g, fmt)  # allocated by the call
    q_ref, s_ref = _ref().reference(x.reshape(24, 256), g, fmt)
    assert q.shape == (2, 12, 128) and s.shape == (2, 12, 256 // g)
    assert torch.equal(q.reshape(24, -1), q_ref)
    assert torch.equal(s.reshape(24, -1).view(torch.uint8), s_ref.view(torch.uint8))


def test_near_the_int32_element_limit():
    m, n = 65535, 32768  # 2^31 - 2^15 elements (4 GiB of bf16)
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    q, s = _cast()(x, 32, "ue8m0")
    torch.cuda.synchronize()
    SEEN.add(selected(OP, "bf16,g32,ue8m0", [(m, n), (m, n // 2), (m, n // 32)]))
    for rows in (slice(0, 64), slice(m - 64, m)):
        q_ref, s_ref = _ref().reference(x[rows], 32, "ue8m0")
        assert torch.equal(q[rows], q_ref) and torch.equal(s[rows], s_ref)


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
