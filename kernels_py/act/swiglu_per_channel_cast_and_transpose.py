"""SwiGLU fused with the per-channel FP8 e4m3 cast written transposed: TileKernels 1.0.0's
``swiglu_forward_and_per_channel_cast_and_transpose(x, "e4m3", num_per_tokens, round_sf,
swiglu_clamp_value=...)`` (``tile_kernels/quant/swiglu_forward_and_per_channel_cast_and_
transpose_kernel.py``; op "swiglu_per_channel_cast_and_transpose").

``x`` is ``[T, 2H]`` (gate ``x[:, :H]``, up ``x[:, H:]``). The activation is ``swiglu``'s, in
fp32, then rounded to x's dtype (bf16), as TileKernels' kernel stores it in its bf16 shared
tile before the cast::

    if clamp:  g = min(g, limit);  u = max(min(u, limit), -limit)
    a[t, h] = bf16((g / (1 + expf(-g))) * u)
    q, scale = per_channel_cast_and_transpose(a, G)     # q [H, T], scale [T / G, H]

G = 32 or 128 tokens a scale (keys ``g32``/``g128``), ``round_sf`` and the clamp ``limit``
(``+inf``: none; the clamp with ``+inf`` is the identity) runtime scalars. silu is
``swiglu.silu_mul`` (libdevice ``expf``, IEEE division: what torch does on CUDA), so
``reference`` on a CUDA tensor gives the kernel's bytes.

Kernel: per_channel_cast_and_transpose's tile (``transposed_tile``: 128 tokens x 64 columns a
CTA, the shared fp32 transpose, the column maxima, the 16-byte code stores); only the load
differs: a 16-byte gate vector and its 16-byte up vector, silu * up in fp32, rounded to bf16.
``T % G == 0``, ``H % 8 == 0`` (TileKernels: T % 128, 2H % 128). TileKernels' option
``without_transpose`` is not this kernel (tileaot.tile_kernels composes it).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from ..ceildiv import ceildiv
from ..quant.per_channel_cast_and_transpose import (
    GROUPS,
    THREADS,
    TILE_H,
    TILE_T,
    VEC,
    tile_spec,
    transposed_tile,
)
from ..quant.per_channel_cast_and_transpose import reference as cast_reference
from .swiglu import reference as swiglu_reference
from .swiglu import silu_mul

DTYPES = ("bfloat16",)
FP8 = "float8_e4m3fn"


def factory(arch: str, dtype: str, group: str):
    """TileLang prim_func ``(x[T, 2H], q[H, T] e4m3fn, scale[T // G, H] fp32, limit fp32,
    round_sf int32)``; ``G`` 32 (``g32``) or 128 (``g128``), ``limit`` the clamp (``+inf``:
    none), ``round_sf`` non-zero: power-of-two scales. ``arch`` does not change the code."""
    if dtype not in DTYPES:
        raise ValueError(f"swiglu_per_channel_cast_and_transpose: unsupported dtype {dtype!r}")
    if group not in GROUPS:
        raise ValueError(f"swiglu_per_channel_cast_and_transpose: unsupported group {group!r}")
    import tilelang.language as T

    g = GROUPS[group]
    Tn, H = T.dynamic("T"), T.dynamic("H")
    tile = transposed_tile(T, dtype, g, Tn, H, _load_macro(T, dtype, H))

    @T.prim_func
    def swiglu_per_channel_cast_and_transpose(
        x: T.Tensor((Tn, 2 * H), dtype),
        q: T.Tensor((H, Tn), FP8),
        scale: T.Tensor((Tn // g, H), "float32"),
        limit: T.float32,
        round_sf: T.int32,
    ):
        with T.Kernel(ceildiv(T, H, TILE_H), ceildiv(T, Tn, TILE_T), threads=THREADS) as (bh, bt):
            tile(x, limit, q, scale, round_sf, bh, bt)

    return swiglu_per_channel_cast_and_transpose


def _load_macro(T, dtype: str, H):
    """The tile's load: 8 activations of token t, columns h ..., rounded to x's dtype."""

    @T.macro
    def load(x, limit, buf, i, t, h):
        gate = T.alloc_local((VEC,), dtype)
        up = T.alloc_local((VEC,), dtype)
        for v in T.vectorized(VEC):
            gate[v] = x[t, h + v]
        for v in T.vectorized(VEC):
            up[v] = x[t, H + h + v]
        for v in T.unroll(VEC):
            gv = T.min(T.cast(gate[v], "float32"), limit)
            uv = T.max(T.min(T.cast(up[v], "float32"), limit), -limit)
            buf[i * VEC + v] = T.cast(silu_mul(T, gv, uv), dtype)

    return load


def reference(x, group: int = 128, clamp=None, round_sf: bool = False):
    """torch reference, the kernel's operations: ``(q [H, T] e4m3fn, scale [T // group, H]
    float32)``: per_channel_cast_and_transpose's reference of swiglu's (``clamp``: the limit).
    On a CUDA tensor bit-exact with the kernel (on the CPU torch's ``exp`` may differ by an
    ulp). TileKernels' ``cast(swiglu_forward(x, swiglu_clamp_value=clamp).bfloat16(), "e4m3",
    (group, 1), round_sf)`` with its codes transposed computes the same bytes
    (tests/test_kernels_cpu_swiglu_per_channel_cast_and_transpose.py)."""
    return cast_reference(swiglu_reference(x, clamp), group, round_sf)


SPEC = tile_spec(
    "swiglu_per_channel_cast_and_transpose",
    factory,
    DTYPES,
    reference,
    "q[H, T], scale = per_channel_cast_and_transpose(bf16(silu(g) * u)), g, u the halves of"
    " x[T, 2H] (optional swiglu_limit clamp), as TileKernels'"
    " swiglu_forward_and_per_channel_cast_and_transpose.",
)
