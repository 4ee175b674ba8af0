"""SwiGLU fused with an optional per-row weight and a per-128-column FP8 e4m3 cast.

TileKernels 1.0.0's ``swiglu_forward_and_per_token_cast(x, "e4m3", 128, ..., round_sf=...)``
with per-row weights and row-major fp32 scales, bit for bit: its reference is
``tile_kernels.torch.swiglu_forward`` followed by ``tile_kernels.torch.cast`` (its tests compare
both exactly). For each row ``i`` of ``x[M, 2H]`` (gate ``g = x[i, :H]``, up ``u = x[i, H:]``,
fp32)::

    if clamp:  g = min(g, limit);  u = max(min(u, limit), -limit)
    a     = ((g / (1 + expf(-g))) * u) * weights[i]       # weight 1 if absent
    amax  = max(max |a| over the 128-column group, 1e-4)
    scale = amax / 448  |  2^ceil(log2(amax / 448))       # round_sf = 0 | 1
    inv   = 448 / amax  |  1 / scale
    q     = e4m3(a * inv)                                 # RN, saturating at 448

``q`` is ``[M, H]`` float8_e4m3fn, ``scale`` ``[M, H / 128]`` float32: the math of
``kernels_py/quant/per_token_cast_fp8.py`` (g128, ``quotient.py``) applied to the fp32
activation, which is never rounded to bf16. The clamp is DeepSeek-V3's ``swiglu_limit`` rule
(TileKernels' ``swiglu_clamp_value``): the gate is capped from above only, the up projection on
both sides.

silu is ``swiglu.silu_mul``: the accurate libdevice ``expf`` and an IEEE division, the
operations torch's CUDA kernels perform for the reference's formula, so ``reference`` on a
CUDA tensor reproduces q and scale bit for bit (on the CPU torch's ``exp`` may differ by an
ulp). It costs ~13 more instructions per element than ``__expf`` and ``rcp.approx``, which
the kernel used before it followed TileKernels (one e4m3 step off in ~1e-5 of codes).

One kernel, one read of x (and of the weights), one write of q and scale; everything else
stays in registers. A block of 128 threads owns ``GROUPS`` = 8 (row, group) pairs for static
H: ``ROWS`` rows x 8 consecutive groups (grid rows x group tiles); for generic H the
``FLAT_GROUPS`` = 16 consecutive pairs ``b * 16 + c`` of the row-major M x H/128 pairs (1-D
grid, _Flat), so no thread idles when 16 does not divide H/128. Each thread holds one 16-byte
vector (8 bf16) of gate and of up per pair (two pairs for generic H), so a group's amax is an
8-element register max plus a 16-lane shuffle reduction.

Cost (SASS, per element): ~35 instructions on sm_90a (+3 with the clamp); sm_70/sm_80 cubins
(also run on sm_86/89) convert to e4m3 in software (no cvt.e4m3x2 before sm_89), issue-bound
there, as per_token_cast_fp8 is.

Optional inputs are runtime scalars, not variants: ``limit`` (``+inf`` = no clamp: a uniform
branch skips the clamp) and ``weighted`` (0: the weights pointer is never read and the weight
is 1.0, an exact no-op), ``round_sf`` (non-zero: power-of-two scales; a select per group). A
group whose activations overflow fp32 and NaN inputs give unspecified results (as in
per_token_cast_fp8; TileKernels defines none either).

Variants: bf16 input only (the MoE activation dtype); static H (``{"H": 7168}`` ...) and
generic (M and H dynamic, ``H % 128 == 0`` required so groups are whole and rows 16-byte
aligned). Loops touching global memory carry ``coalesced_width`` = one 16-byte vector.
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..quant.quotient import inv_of, reference_scale_and_inv, scale_of
from ..spec import BY_GENERATION, KernelSpec
from .swiglu import silu_mul

DTYPES = ("bfloat16",)
FP8 = "float8_e4m3fn"
FP8_MAX = 448.0
AMAX_FLOOR = 1e-4
GROUP = 128
FLT_MAX = 3.4028234663852886e38
# Specialised H (q's width): DeepSeek-V3's MoE expert size 2048, and the project's 4096 and
# 7168 (the benchmark size); 18432 is DeepSeek-V3 / Kimi-K2's dense-layer intermediate_size
# (their fp8 checkpoints, examples/models). Any other multiple of 128 takes the generic kernel.
STATIC_H = (2048, 4096, 7168, 18432)

THREADS = 128
ROWS = 1  # rows per block: 16 fp32 of gate+up per thread keeps registers low (occupancy)
GROUPS = 8  # 128-column groups per block: 1 x 8 x 128 outputs, 8 per thread
# Generic H: 16 pairs per block, two per thread. The flat layout's per-thread index work (the
# row division, 64-bit addresses, bounds) is then shared by 16 elements instead of 8: on the
# H200, 32768 x 2*1408 runs in 81.3 us against 96.9 with 8 (and 115.3 with 32; 16 pairs on 256
# threads 97.5), outputs identical (bench/tune.py, bench/results/2026-12-04b-h200.md). Static H
# stays at 8: 16 made H = 7168 slower (424.3 against 331.5 us), as 56 groups are not whole tiles.
FLAT_GROUPS = 16
VEC = 8  # bf16 elements per 16-byte vector


def factory(arch: str, dtype: str, H: int | None = None):
    """TileLang prim_func ``(x[M, 2H], weights[M], q[M, H], scale[M, H/128], limit, weighted,
    round_sf)``; ``round_sf`` non-zero: power-of-two scales. ``arch`` does not change the code.
    """
    if dtype not in DTYPES:
        raise ValueError(f"swiglu_per_token_cast_fp8: unsupported dtype {dtype!r}")
    if H is not None and H % GROUP:
        raise ValueError(f"swiglu_per_token_cast_fp8: H={H} is not a multiple of {GROUP}")
    return _kernel(dtype, H)


def _kernel(dtype: str, h: int | None):
    import tilelang.language as T

    width = T.int32(VEC)
    M = T.dynamic("M")
    H = T.dynamic("H") if h is None else h
    G = H // GROUP
    at = _Tiled(M, G) if h is not None else _Flat(T, M, G)
    n = at.groups  # (row, group) pairs per block

    @T.prim_func
    def swiglu_per_token_cast_fp8(
        x: T.Tensor((M, 2 * H), dtype),
        weights: T.Tensor((M,), "float32"),
        q: T.Tensor((M, H), FP8),
        scale: T.Tensor((M, G), "float32"),
        limit: T.float32,
        weighted: T.int32,
        round_sf: T.int32,
    ):
        with T.Kernel(*at.grid(T), threads=THREADS) as (bm, bg):
            if h is None:
                # H % 128 == 0 (the variant's constraint) keeps rows 16-byte aligned.
                T.assume(H % GROUP == 0)
                # Each pair's row in an int32 register: a division inside an index would be
                # widened to int64 (a ~30-instruction software division per use).
                rows = T.alloc_fragment((ROWS, n), "int32")
                for r, c in T.Parallel(ROWS, n):
                    rows[r, c] = T.truncdiv(bm * n + c, G)
                flat = (T.view(x, (M * 2 * H,)), T.view(q, (M * H,)), T.view(scale, (M * G,)))
                at.bind(rows, *flat)
            g = T.alloc_fragment((ROWS, n, GROUP), "float32")
            u = T.alloc_fragment((ROWS, n, GROUP), "float32")
            s = T.alloc_fragment((ROWS, n), "float32")  # amax, then the scale
            y = T.alloc_fragment((ROWS, n), "float32")  # the multiplier inv
            wr = T.alloc_fragment((ROWS, n), "float32")  # row weight, per (row, group)
            # Gate and up in separate loops: one loop with both loads halves the vector width.
            for r, c, j in T.Parallel(ROWS, n, GROUP, coalesced_width=width):
                g[r, c, j] = T.if_then_else(at.inside(bm, bg, r, c), at.x(x, bm, bg, r, c, j), 0)
            for r, c, j in T.Parallel(ROWS, n, GROUP, coalesced_width=width):
                u[r, c, j] = T.if_then_else(
                    at.inside(bm, bg, r, c), at.x(x, bm, bg, r, c, j, up=True), 0
                )
            if limit <= FLT_MAX:  # uniform branch: +inf means no clamp
                for r, c, j in T.Parallel(ROWS, n, GROUP):
                    g[r, c, j] = T.min(g[r, c, j], limit)
                    u[r, c, j] = T.max(T.min(u[r, c, j], limit), -limit)
            for r, c in T.Parallel(ROWS, n):  # one weight load per thread
                wr[r, c] = T.if_then_else(
                    (weighted != 0) & at.row_inside(bm, bg, r, c),
                    weights[at.row(bm, bg, r, c)],
                    1.0,
                )
            for r, c, j in T.Parallel(ROWS, n, GROUP):
                g[r, c, j] = silu_mul(T, g[r, c, j], u[r, c, j]) * wr[r, c]
                u[r, c, j] = T.abs(g[r, c, j])
            T.reduce_max(u, s, dim=2)  # |a| >= 0, so the -inf start value never survives
            for r, c in T.Parallel(ROWS, n):
                wr[r, c] = T.max(s[r, c], AMAX_FLOOR)  # the clamped amax (wr is free again)
                s[r, c] = scale_of(T, wr[r, c], FP8_MAX, round_sf)
                y[r, c] = inv_of(T, wr[r, c], s[r, c], FP8_MAX, round_sf)
                if at.inside(bm, bg, r, c):
                    at.scale_out(scale)[at.scale_index(bm, bg, r, c)] = s[r, c]
            for r, c, j in T.Parallel(ROWS, n, GROUP):
                g[r, c, j] = T.ieee_mul(g[r, c, j], y[r, c])
            # A separate cast-and-store loop lets TileLang pair the fp8 conversions (cvt.x2)
            # and store 8 bytes per vector; the conversion saturates at 448 (SATFINITE).
            for r, c, j in T.Parallel(ROWS, n, GROUP, coalesced_width=width):
                if at.inside(bm, bg, r, c):
                    at.q_out(q)[at.q_index(bm, bg, r, c, j)] = g[r, c, j]

    return swiglu_per_token_cast_fp8


class _Tiled:
    """Static H: block (bm, bg) owns rows ``bm * ROWS + r`` x groups ``bg * GROUPS + c``.
    Every specialised H is a multiple of GROUPS groups (1024 columns), so no thread idles."""

    groups = GROUPS

    def __init__(self, M, G):
        self.M, self.G = M, G

    def grid(self, T):
        # Rows on gridDim.x (up to 2^31 - 1); gridDim.y (65535) would cap M at 262,140.
        return T.ceildiv(self.M, ROWS), T.ceildiv(self.G, GROUPS)

    def row(self, bm, bg, r, c):
        return bm * ROWS + r

    def _col(self, bg, c, j):
        return (bg * GROUPS + c) * GROUP + j

    def x(self, x, bm, bg, r, c, j, up=False):
        """Gate element (up: the up element, H columns further) of (row, group) (r, c)."""
        col = self._col(bg, c, j)
        return x[bm * ROWS + r, self.G * GROUP + col if up else col]

    def q_out(self, q):
        return q

    def scale_out(self, scale):
        return scale

    def q_index(self, bm, bg, r, c, j):
        return bm * ROWS + r, self._col(bg, c, j)

    def scale_index(self, bm, bg, r, c):
        return bm * ROWS + r, bg * GROUPS + c

    def row_inside(self, bm, bg, r, c):
        return bm * ROWS + r < self.M

    def inside(self, bm, bg, r, c):
        return (bm * ROWS + r < self.M) & (bg * GROUPS + c < self.G)


class _Flat:
    """Generic H: the M x G (row, group) pairs in row-major order, FLAT_GROUPS consecutive
    pairs per block on a 1-D grid (gridDim.y = 1), pair ``bm * FLAT_GROUPS + c`` = row
    ``pair / G``, group ``pair % G``. A (row, group-tile) grid would leave threads idle in
    each row's last tile unless the tile divides G (H = 1408: G = 11 on two 8-group tiles, 69 %
    busy); here only the last block can hold a partial tile. On flat views, pair p's q group is
    group p, its scale element p, and its gate group ``p + row * G`` of x (x rows hold 2G
    groups), its up group G further: one int32 division per pair (M * G < 2^23: the wrapper
    refuses 2^31 elements of x)."""

    groups = FLAT_GROUPS

    def __init__(self, T, M, G):
        assert ROWS == 1, "the flat layout maps pairs, one row each"
        self.M, self.G = M, G

    def grid(self, T):
        return ceildiv(T, self.M * self.G, FLAT_GROUPS), 1

    def bind(self, rows, xf, qf, sf):
        """``rows``: the int32 fragment of ``pair / G`` per (r, c), computed once per thread
        (inside an index the division would be widened to int64, a software routine per use,
        and the bounds TileLang adds per element would stop the 16-byte loads); x, q and scale
        as flat views."""
        self.rows, self.xf, self.qf, self.sf = rows, xf, qf, sf

    def _pair(self, bm, c):
        return bm * FLAT_GROUPS + c

    def row(self, bm, bg, r, c):
        return self.rows[r, c]

    def x(self, x, bm, bg, r, c, j, up=False):
        group = self._pair(bm, c) + self.rows[r, c] * self.G  # the gate's group on x's view
        if up:
            group += self.G
        return self.xf[group * GROUP + j]

    def q_out(self, q):
        return self.qf

    def scale_out(self, scale):
        return self.sf

    def q_index(self, bm, bg, r, c, j):
        return (self._pair(bm, c) * GROUP + j,)

    def scale_index(self, bm, bg, r, c):
        return (self._pair(bm, c),)

    def row_inside(self, bm, bg, r, c):
        return self.inside(bm, bg, r, c)

    def inside(self, bm, bg, r, c):
        return self._pair(bm, c) < self.M * self.G


def reference(x, weights=None, clamp=None, round_sf: bool = False):
    """torch reference, the kernel's fp32 operations in its order: ``(q, scale)``; on a CUDA
    tensor bit-exact with the kernel. TileKernels' ``cast(swiglu_forward(x, ..., clamp), "e4m3",
    (1, 128), round_sf=round_sf)`` computes the same bytes (tests/test_parity_quant.py)."""
    import torch

    m, h2 = x.shape
    h = h2 // 2
    g = x[:, :h].float()
    u = x[:, h:].float()
    if clamp is not None:
        g = g.clamp(max=clamp)
        u = u.clamp(min=-clamp, max=clamp)
    a = g / (1.0 + torch.exp(-g)) * u
    if weights is not None:
        a = a * weights.float()[:, None]
    a = a.reshape(m, h // GROUP, GROUP)
    amax = a.abs().amax(dim=-1, keepdim=True).clamp(min=AMAX_FLOOR)
    scale, inv = reference_scale_and_inv(amax, FP8_MAX, round_sf)
    q = (a * inv).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.reshape(m, h), scale.reshape(m, h // GROUP)


def _constraints(key, spec) -> dict[str, int]:
    return {} if spec else {"H": GROUP}


SPEC = KernelSpec(
    op="swiglu_per_token_cast_fp8",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({}, *({"H": h} for h in STATIC_H)),
    reference=reference,
    lowering_classes=BY_GENERATION,
    lowering_reason="block reductions: named barrier from sm_80; fp32 pairs packed from sm_100",
    constraints=_constraints,
    doc="q, scale = e4m3 per-128-group cast of silu(x[:, :H]) * x[:, H:] (* weights[:, None]),"
    " with an optional swiglu_limit clamp; x[M, 2H] bf16.",
)
