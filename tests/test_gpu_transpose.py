"""GPU tests of transpose: bit-exact against ``x.transpose(-1, -2).contiguous()``.

Inputs are random bytes viewed as the dtype (every bit pattern: NaNs, infs, subnormals), the
output is poisoned with 0xFF bytes before each call, and the comparison is on the raw bits.
Sizes cover the 16-byte vector path (R and C multiples of 16 bytes' worth of elements), the
scalar path (odd R or C), partial tiles, batches, and a batch past gridDim.z's 65535 (split
into two launches). Each test checks which variant served it; the last test checks that the
tests together exercised every transpose variant built for this GPU.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import assert_every_variant_exercised

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

SEEN: set[str] = set()
# key -> the torch dtypes it serves (the kernels move bits of one width)
KEYS = {
    "e4m3": [torch.float8_e4m3fn, torch.float8_e5m2, torch.uint8, torch.int8],
    "bf16": [torch.bfloat16, torch.int16],
    "fp16": [torch.float16],
    "fp32": [torch.float32, torch.int32],
}
SHAPES = [
    (1, 1),
    (7, 300),
    (64, 64),
    (128, 128),
    (33, 17),
    (129, 257),
    (1000, 16),
    (16, 1000),
    (4096, 7168),
    (3, 130, 67),
    (2, 1, 5),
    (5, 128, 256),
    (2, 3, 64, 48),
    (80, 4112),  # 16-byte path for every width, partial row and column tiles
    (136, 392),  # 16-byte path but e4m3 (392 % 16 != 0), partial tiles
]
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def _select(key: str, b: int, r: int, c: int) -> str:
    from tileaot import _lib

    native = _lib.native()
    return native.select(native.lookup("transpose", key), 0, (b, r, c, b, c, r))


def _random_bits(shape, dtype):
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (*shape[:-1], shape[-1] * size), dtype=torch.uint8, device="cuda")
    return raw.view(dtype)


def _check(x, key):
    import tileaot

    shape = x.shape
    b = 1
    for d in shape[:-2]:
        b *= d
    out_shape = (*shape[:-2], shape[-1], shape[-2])
    poison = (*out_shape[:-1], out_shape[-1] * x.element_size())
    out = torch.full(poison, 0xFF, dtype=torch.uint8, device="cuda").view(x.dtype)
    name = _select(key, min(b, 65520), shape[-2], shape[-1])
    SEEN.add(name)
    got = tileaot.transpose(x, out=out)
    torch.cuda.synchronize()
    assert got is out
    bits = BITS[x.element_size()]
    want = x.view(bits).transpose(-1, -2).contiguous()
    differ = (out.view(bits) != want).sum().item()
    assert differ == 0, f"{name} {x.dtype} {tuple(shape)}: {differ} elements differ"


@pytest.mark.parametrize("key", list(KEYS))
@pytest.mark.parametrize("shape", SHAPES)
def test_transpose_is_bit_exact(key, shape):
    _check(_random_bits(shape, KEYS[key][0]), key)


@pytest.mark.parametrize(
    ("key", "dtype"), [(k, d) for k, ds in KEYS.items() for d in ds[1:]], ids=str
)
def test_other_dtypes_of_the_same_width(key, dtype):
    _check(_random_bits((37, 130), dtype), key)


def test_allocating_call_and_bool():
    import tileaot

    x = torch.rand(300, 77, device="cuda") > 0.5
    assert torch.equal(tileaot.transpose(x), x.t().contiguous())
    y = torch.randn(3, 64, 96, device="cuda").bfloat16()
    assert torch.equal(tileaot.transpose(y), y.transpose(1, 2).contiguous())


def test_batch_past_grid_z_is_split():
    _check(_random_bits((65600, 2, 3), torch.bfloat16), "bf16")


def test_every_transpose_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised(("transpose",), SEEN)
