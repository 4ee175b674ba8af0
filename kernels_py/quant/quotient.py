"""``RN(x / scale)`` for many x sharing one scale, without a division per element.

An IEEE fp32 division costs ~10 instructions per element (MUFU rcp at a quarter of the FMA
rate, Newton steps, a range check and a branch) and makes the casts issue-bound. When a whole
group shares ``scale``, take ``r = RN(1/scale)`` once per group and per element::

    y0 = RN(x * r);  y1 = fma(fma(-scale, y0, x), r, y0);  y = fma(fma(-scale, y1, x), r, y1)

The two residual corrections of CUDA's own ``div.rn.f32`` fast path, hoisted out of the element
loop: y1 is within one ulp of x/scale, so the second residual is exact and, r being the
correctly rounded reciprocal, ``y == RN(x / scale)`` (Markstein's theorem). Valid without
overflow (callers divide by a scale >= |x|/448) and subnormal residuals, i.e. for quotients
above 2^-100 -- smaller ones are ±0 in e4m3 and e2m1 either way, and ``copysign(y, x)`` keeps
the sign of zero.
tests/test_kernels_cpu_per_block_cast_fp8.py emulates the sequence exactly and compares it
with IEEE division on every bf16/fp16 value; the GPU tests compare the casts with torch's
division bit for bit.
"""


def reciprocal(T, scale):
    """``r = RN(1 / scale)``, once per group (IEEE ``__frcp_rn``; CUDA's 3-instruction
    fast-path reciprocal measured no faster on an H200, bench/results/2026-11-29-h200-tuning.md).
    """
    return T.ieee_frcp(scale)


def quotient(T, x, scale, r):
    """``RN(x / scale)`` for fp32 ``x``, given ``r = reciprocal(T, scale)``: 5 FP32 ops."""
    y0 = T.ieee_mul(x, r)
    y1 = T.ieee_fmaf(T.ieee_fmaf(-scale, y0, x), r, y0)
    return T.copysign(T.ieee_fmaf(T.ieee_fmaf(-scale, y1, x), r, y1), x)
