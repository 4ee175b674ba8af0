"""GPU tests of per_channel_cast_fp8 against kernels_py.quant.per_channel_cast_fp8.reference.

Every dtype x the generic variant on odd sizes (row tails, N not a multiple of the 16-byte
vector, 1x1, TileKernels' own M % 128 == 0 and N % 64 == 0 shapes) with columns of very
different magnitudes, an all-zero column, saturating values, -0.0, tiny negatives (e4m3 -0)
and fp16/bf16 subnormals. Outputs are poisoned (0xFF bytes, an e4m3 NaN; NaN scales) before
each call; q bytes and scales must be bit-exact, for round_sf False and True (TileKernels'
per_channel_cast semantics: tests/test_parity_quant.py holds the reference to it). Also:
NaN/Inf inputs behave as the kernel docstring says, a call of more than 65535 row groups is
split correctly, and every per_channel_cast_fp8 variant built for this GPU was exercised.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import RowCast, assert_every_variant_exercised

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

CAST = RowCast(
    "per_channel_cast_fp8", lambda m, n: ((m, n), (-(-m // 128), n)), torch.float8_e4m3fn
)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SHAPES = [  # (M, N)
    (128, 64),
    (256, 7168),
    (4096, 2048),
    (1, 1),
    (1, 4096),
    (7, 9),
    (129, 384),
    (130, 257),
    (300, 1000),
    (4001, 136),
    (3, 8200),
    (256, 36),
]


def _input(m: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(m * 10007 + n)
    mag = torch.pow(10.0, torch.randint(-4, 4, (1, n), device="cuda", generator=g).float())
    x = torch.randn(m, n, device="cuda", generator=g) * mag
    x[:, 0] = 0  # an all-zero column: floor scale, zero q
    if n > 2:
        x[-1, 2] = 6e4 if dtype == torch.float16 else 1e5  # saturates its group
    x[-1, -1] = -0.0
    if m > 1:
        x[1, -1] = -1e-30 if dtype != torch.float16 else -1e-7  # tiny: e4m3 -0
    if dtype != torch.float32 and m > 2 and n > 3:
        x[2, 3] = 1e-40 if dtype == torch.bfloat16 else 3e-8  # subnormal in x's dtype
    return x.to(dtype)


@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("key", DTYPES)
@pytest.mark.parametrize("m,n", SHAPES)
def test_per_channel_cast_fp8(key, m, n, round_sf):
    CAST.check_case(_input(m, n, DTYPES[key]), key, round_sf)


def test_allocating_call_matches_out_call():
    CAST.check_allocating_call(_input(300, 7168, torch.bfloat16), round_sf=True)


@pytest.mark.parametrize("m,n", [(300, 7168), (260, 257)])
def test_non_finite_inputs(m, n):
    """round_sf=False (the kernel docstring's "Non-finite x"): a NaN element is NaN in q and
    its group is cast as if it were 0 (the |x| max ignores NaN); a group holding +Inf gets an
    Inf scale, multiplier 448 / Inf = 0, so NaN (Inf * 0) there and ±0 elsewhere."""
    x = _input(m, n, torch.bfloat16)
    x[200, 200] = float("nan")  # group 1 of column 200
    x[10, n - 1] = float("inf")  # group 0 of the last column
    q, scale, name = CAST.run(x, "bf16")
    clean = x.clone()
    clean[200, 200] = 0
    clean[:128, n - 1] = 0
    q_ref, scale_ref = CAST.reference(clean)
    nan_q = (q.view(torch.uint8) & 0x7F) == 0x7F
    assert nan_q[200, 200] and scale[1, 200] == scale_ref[1, 200]
    assert scale[0, -1] == float("inf") and nan_q[10, n - 1]
    assert nan_q[:128, -1].sum() == 1 and (q.float()[:128, -1].nan_to_num(0) == 0).all()
    keep = torch.ones_like(nan_q)
    keep[200, 200] = False
    keep[:128, -1] = False
    assert torch.equal(q.view(torch.uint8)[keep], q_ref.view(torch.uint8)[keep]), name
    keep_s = torch.ones_like(scale, dtype=torch.bool)
    keep_s[0, -1] = False
    assert torch.equal(scale[keep_s], scale_ref[keep_s]), name


def test_tall_input_is_split_over_launches():
    m, n = 65535 * 128 + 200, 2  # 65537 row groups: two launches
    x = _input(m, n, torch.bfloat16)
    q, scale, name = CAST.run(x, "bf16")
    CAST.assert_exact(q, scale, x, name=name)


def test_launch_is_ordered_on_the_callers_stream():
    """x written on a side stream after a long sleep: a launch on any other stream would read
    the poisoned input."""
    CAST.check_stream_order(_input(512, 7168, torch.bfloat16))


def test_every_per_channel_cast_fp8_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((CAST.op,), CAST.seen)
