"""GPU tests of per_token_cast_e5m6 against kernels_py.quant.per_token_cast_e5m6.reference.

Both dtypes x round_sf on odd sizes (one 8-element piece, rows shorter and longer than one
pass-1 chunk, N not a multiple of 16, TileKernels' hidden sizes) with rows of very different
magnitudes, an all-zero row (floor scale), -0.0, values near the E5M6 rounding threshold and
bf16 subnormals. Outputs are poisoned (0xFF bytes, NaN scales) before each call; q bytes and
scales must be bit-exact. Also: TileKernels' own reference (tile_kernels.torch.cast_e5m6)
on the GPU, infinite inputs bit for bit, NaN rows leaving the other rows intact, the caller's
stream, and every per_token_cast_e5m6 variant built for this GPU exercised.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import RowCast, assert_every_variant_exercised

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

CAST = RowCast("per_token_cast_e5m6", lambda m, n: ((m, n // 8 * 12), (m, 1)), torch.uint8)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
SHAPES = [  # (M, N), N % 8 == 0
    (1, 8),
    (7, 24),
    (3, 40),
    (129, 136),
    (5, 1000),
    (64, 2048),
    (33, 4104),
    (16, 7168),
    (4001, 256),
    (2, 16392),
]


def _input(m: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(m * 10007 + n)
    mag = torch.pow(10.0, torch.randint(-6, 6, (m, 1), device="cuda", generator=g).float())
    x = torch.randn(m, n, device="cuda", generator=g) * mag
    x[0] = 0  # an all-zero row: the 1e-4 floor, zero codes
    x[-1, -1] = -0.0
    if m > 1 and n > 2:
        x[1, 1] = 1.0 + 2.0**-7  # on a code's rounding threshold after scaling
        x[1, 2] = -3e-9  # an fp16 subnormal after scaling
    if dtype == torch.bfloat16 and m > 2 and n > 3:
        x[2, 3] = 1e-40  # subnormal in bf16
    return x.to(dtype)


@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("key", DTYPES)
@pytest.mark.parametrize("m,n", SHAPES)
def test_per_token_cast_e5m6(key, m, n, round_sf):
    CAST.check_case(_input(m, n, DTYPES[key]), key, round_sf)


@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("key", DTYPES)
def test_tilekernels_reference_on_the_gpu(key, round_sf):
    from _tile_kernels import tk

    x = _input(129, 7168, DTYPES[key])
    q, scale, name = CAST.run(x, key, round_sf)
    q_tk, scale_tk = tk("cast_e5m6").cast_to_e5m6(x, 7168, round_sf=round_sf)
    assert torch.equal(q, q_tk), name
    assert torch.equal(scale.view(torch.int32), scale_tk.view(torch.int32)), name


def test_allocating_call_matches_out_call():
    CAST.check_allocating_call(_input(300, 7168, torch.bfloat16), round_sf=True)


@pytest.mark.parametrize("round_sf", [False, True])
def test_non_finite_inputs(round_sf):
    """Infinite elements: bit for bit the reference (the row's scale is inf). A NaN element's
    row is unspecified (the wrapper docstring); every other row is still exact."""
    x = _input(40, 1000, torch.float32)
    x[5, 7] = float("inf")
    x[6, 0] = -float("inf")
    x[9, 500] = float("nan")
    q, scale, name = CAST.run(x, "fp32", round_sf)
    q_ref, scale_ref = CAST.reference(x, round_sf)
    assert scale[5, 0] == float("inf") and scale[6, 0] == float("inf"), name
    keep = torch.ones(40, dtype=torch.bool, device="cuda")
    keep[9] = False
    assert torch.equal(q[keep], q_ref[keep]), name
    assert torch.equal(scale[keep].view(torch.int32), scale_ref[keep].view(torch.int32)), name


def test_launch_is_ordered_on_the_callers_stream():
    """x written on a side stream after a long sleep: a launch on any other stream would read
    the poisoned input."""
    CAST.check_stream_order(_input(512, 7168, torch.bfloat16))


def test_every_per_token_cast_e5m6_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((CAST.op,), CAST.seen)
