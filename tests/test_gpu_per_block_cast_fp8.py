"""GPU tests of per_block_cast_fp8 against kernels_py.quant.per_block_cast_fp8.reference.

Every dtype x variant (N = 2048, 4096, 7168 and generic sizes: tails in both dimensions, N
not a multiple of the 16-byte vector, 1x1) on random inputs spanning many magnitudes per
block, with an all-zero block, saturating values, -0.0 and tiny negatives (e4m3 -0), and
fp16/bf16 subnormals. Outputs are poisoned (0xFF bytes, an e4m3 NaN; NaN scales) before each
call; q bytes and scales must be bit-exact, for round_sf False and True (TileKernels'
per_block_cast semantics: tests/test_parity_quant.py holds the reference to it). Also:
NaN/Inf inputs behave as the kernel docstring says, a call of more than 65535 row blocks is
split correctly, and every per_block_cast_fp8 variant built for this GPU was exercised.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import RowCast, assert_every_variant_exercised

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

CAST = RowCast(
    "per_block_cast_fp8",
    lambda m, n: ((m, n), (-(-m // 128), -(-n // 128))),
    torch.float8_e4m3fn,
)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SHAPES = [  # (M, N)
    (1, 2048),
    (300, 2048),
    (129, 4096),
    (37, 7168),
    (1024, 7168),
    (1, 1),
    (5, 7),
    (130, 257),
    (200, 1000),
    (129, 384),
    (3, 8200),
    (256, 36),
]


def _input(m: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(m * 10007 + n)
    mag = torch.pow(10.0, torch.randint(-4, 4, (m, 1), device="cuda", generator=g).float())
    x = torch.randn(m, n, device="cuda", generator=g) * mag
    x[: min(m, 128), : min(n, 128)] = 0  # an all-zero block: floor scale, zero q
    if m > 128 or n > 128:
        x[-1, -1] = 6e4 if dtype == torch.float16 else 1e5  # saturates its block
    x[-1, 0] = -0.0
    if n > 1:
        x[-1, 1] = -1e-30 if dtype != torch.float16 else -1e-7  # tiny: e4m3 -0
    if dtype != torch.float32 and m > 2 and n > 2:
        x[2, 2] = 1e-40 if dtype == torch.bfloat16 else 3e-8  # subnormal in x's dtype
    return x.to(dtype)


@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("key", DTYPES)
@pytest.mark.parametrize("m,n", SHAPES)
def test_per_block_cast_fp8(key, m, n, round_sf):
    CAST.check_case(_input(m, n, DTYPES[key]), key, round_sf)


def test_allocating_call_matches_out_call():
    CAST.check_allocating_call(_input(300, 7168, torch.bfloat16), round_sf=False)


@pytest.mark.parametrize("m,n", [(300, 7168), (260, 257)])
def test_non_finite_inputs(m, n):
    """round_sf=False (the kernel docstring's "Non-finite x"): a NaN element is NaN in q and
    its block is cast as if it were 0 (the |x| max ignores NaN); a block holding +Inf gets an
    Inf scale, multiplier 448 / Inf = 0, so NaN (Inf * 0) there and ±0 elsewhere."""
    x = _input(m, n, torch.bfloat16)
    x[200, 200] = float("nan")  # block (1, 1)
    x[10, n - 1] = float("inf")  # the last block of row-block 0
    q, scale, name = CAST.run(x, "bf16")
    clean = x.clone()
    clean[200, 200] = 0
    clean[:128, (n - 1) // 128 * 128 :] = 0
    q_ref, scale_ref = CAST.reference(clean)
    nan_q = (q.view(torch.uint8) & 0x7F) == 0x7F
    assert nan_q[200, 200] and scale[1, 1] == scale_ref[1, 1]
    inf_block = (slice(0, 128), slice((n - 1) // 128 * 128, n))
    assert scale[0, -1] == float("inf") and nan_q[10, n - 1]
    assert nan_q[inf_block].sum() == 1 and (q.float()[inf_block].nan_to_num(0) == 0).all()
    keep = torch.ones_like(nan_q)
    keep[200, 200] = False
    keep[inf_block] = False
    assert torch.equal(q.view(torch.uint8)[keep], q_ref.view(torch.uint8)[keep]), name
    keep_s = torch.ones_like(scale, dtype=torch.bool)
    keep_s[0, -1] = False
    assert torch.equal(scale[keep_s], scale_ref[keep_s]), name


def test_tall_input_is_split_over_launches():
    m, n = 65535 * 128 + 200, 2  # 65537 row blocks: two launches
    x = _input(m, n, torch.bfloat16)
    q, scale, name = CAST.run(x, "bf16")
    CAST.assert_exact(q, scale, x, name=name)


def test_launch_is_ordered_on_the_callers_stream():
    """x written on a side stream after a long sleep: a launch on any other stream would read
    the poisoned input."""
    CAST.check_stream_order(_input(512, 7168, torch.bfloat16))


def test_every_per_block_cast_fp8_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((CAST.op,), CAST.seen)
