"""The FP8 casts' scale and quantisation multiplier: TileKernels' formulation.

DeepSeek's TileKernels 1.0.0 (``tile_kernels/quant/common.py`` ``get_sf_and_inv`` in its kernels,
``tile_kernels/torch/cast.py`` ``cast`` as its reference) quantises a group sharing ``amax``
(already clamped to the floor) with ``max = 448`` (e4m3) as::

    round_sf=False:  scale = RN(amax / max);   inv = RN(max / amax)
    round_sf=True:   scale = 2^ceil(log2(RN(amax / max)));  inv = 1 / scale   (exact)
    q = e4m3(clamp(RN(x * inv), -max, max))

i.e. one multiply per element by a per-group multiplier, not a division by the scale (the two
differ in an e4m3 step for about 1e-4 of bf16 inputs when ``round_sf=False``; with a power-of-
two scale they agree). ``round_sf`` rounds the scale *up* to a power of two through its bit
pattern: with ``bits`` the scale's fp32 bits, the biased exponent of the rounded scale is
``((bits - 1) >> 23) + 1`` (an exact power of two keeps its exponent; anything above it moves
one up), the scale is that exponent in an otherwise zero fp32 and ``inv`` the exponent
``254 - e`` (``2^-(e - 127)``). The floor ``amax >= 1e-4`` keeps the scale a positive normal
fp32, so the bit trick and ``inv`` are exact; both divisions are IEEE (``__fdiv_rn``, immune to
fast-math flags).
"""

# The casts take ``round_sf`` as a runtime int32 scalar (0 or 1), not as a dispatch key: the
# choice costs one uniform select per group, and the ops' dispatch keys (and the variants
# `python -m tileaot check` knows) stay what they were.


def scale_of(T, amax, max_value: float, round_sf):
    """fp32 ``scale`` of a group whose clamped |x| max is ``amax``; ``round_sf`` a runtime
    int32 (non-zero: the power-of-two ceiling)."""
    s = T.ieee_fdiv(amax, max_value)
    e = T.shift_right(T.reinterpret(s, "uint32") - T.uint32(1), T.uint32(23)) + T.uint32(1)
    return T.if_then_else(round_sf != 0, T.reinterpret(T.shift_left(e, T.uint32(23)), "float32"), s)


def inv_of(T, amax, scale, max_value: float, round_sf):
    """fp32 multiplier ``inv`` for the same group, given its ``scale = scale_of(...)``: a
    power-of-two scale ``2^k`` (bits ``e << 23``) has the exact inverse with bits
    ``(254 - e) << 23``, i.e. ``(254 << 23) - bits``; otherwise ``RN(max / amax)``."""
    pow2_inv = T.reinterpret(T.uint32(254 << 23) - T.reinterpret(scale, "uint32"), "float32")
    return T.if_then_else(round_sf != 0, pow2_inv, T.ieee_fdiv(T.float32(max_value), amax))


def reference_scale_and_inv(amax, max_value: float, round_sf: bool):
    """torch: the same ``(scale, inv)`` for a float32 tensor of clamped maxima (CPU or CUDA).

    Tensor divisors on purpose: torch turns division by a Python scalar into a multiplication
    by its reciprocal on CUDA, which is off by one ulp for some amax.
    """
    import torch

    mx = torch.full_like(amax, max_value)
    s = amax / mx
    if not round_sf:
        return s, mx / amax
    e = ((s.view(torch.int32) - 1) >> 23) + 1
    return (e << 23).view(torch.float32), ((254 - e) << 23).view(torch.float32)
