"""SwiGLU backward on FP8 inputs with per-row routing weights: TileKernels 1.0.0's
``tile_kernels.torch.swiglu_backward`` (the reference of its
``swiglu_backward_and_per_token_cast``).

Row ``i`` of the e4m3 input ``x[M, 2H]`` with its fp32 scales ``x_sf[M, 2H / P]`` (one per
``P`` = 32 or 128 columns) is the gate ``g`` (first half) and the up projection ``u``; the
row's weight is ``w = weight.view(-1)[pos_to_token_topk[i]]`` (0 where the position is
negative: a padding row). In fp32, element by element, with ``c = swiglu_clamp_value``
(``+inf``: no clamp)::

    g = e4m3(x[i, j]) * x_sf[i, j // P];   u = e4m3(x[i, H + j]) * x_sf[i, (H + j) // P]
    cg = g > c;   cu = (u > c) | (u < -c)       # on the dequantised values
    g = c if g > c;   u = c if u > c;   u = -c if u < -c
    t = 1 + expf(-g);   s = 1 / t
    a = (g / t) * u
    out[i, j]        = a * w
    ws = (grad_out[i, j] * w) * s
    x_grad[i, j]     = 0 if cg else (ws * u) * fma(g, 1 - s, 1)
    x_grad[i, H + j] = 0 if cu else ws * g
    weight_grad.view(-1)[pos_to_token_topk[i]] = sum_j grad_out[i, j] * a   (rows with a
                                                                             position >= 0)

``expf`` is the accurate libdevice one and both divisions IEEE (``__fdiv_rn``): the operations
torch's CUDA kernels perform for the reference's formula; ``fma`` is one fused multiply-add
(``__fmaf_rn``), which TileKernels' reference asks of ``torch.compile`` (its
``elementwise_fma``). So ``out`` and ``x_grad`` equal the reference bit for bit on a CUDA
tensor (on the CPU torch's ``exp`` may differ by an ulp). The weight gradient is a float32 sum
in a different order than torch's (TileKernels' test bound: 1e-4 absolute and relative).

``weight_grad`` entries no row names are zero: a first kernel zeroes every ``(t, k)`` with
``token_topk_to_pos[t, k] < 0``, as TileKernels' kernel; the mapping must be the inverse of
``pos_to_token_topk`` (as ``get_fused_mapping`` returns both), every routed ``(t, k)`` named by
exactly one row.

Kernels: block ``b < T * K`` of the first zeroes unrouted weight gradients; the second has one
block of THREADS threads per row, each thread ``VEC`` consecutive columns per step (8 fp8
bytes of gate and of up, 16 bytes of grad_out), the dot product a per-thread partial sum and
one block reduction. ``out`` and ``x_grad`` are float32 (the reference's) or bfloat16 (the
fused kernel's, one rounding of the same values). Generic sizes only (M, H, T, K dynamic,
``H % P == 0``).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.
from ..ceildiv import ceildiv
from ..moe.moe_reduce import fma_f32
from ..spec import BY_GENERATION, KernelSpec

OUT_DTYPES = ("float32", "bfloat16")
GROUPS = (32, 128)
FP8 = "float8_e4m3fn"
THREADS = 128
VEC = 8  # columns per thread and step: 8 fp8 of gate and up, 8 bf16 of grad_out
ZERO_THREADS = 256  # threads of the weight-gradient zeroing kernel


def factory(arch: str, out_dtype: str, group: str):
    """TileLang prim_func ``(x[M, 2H] e4m3, x_sf[M, 2H/P], grad_out[M, H] bf16, weight[T, K],
    pos_to_token_topk[M] i32, token_topk_to_pos[T, K] i32, out[M, H], x_grad[M, 2H],
    weight_grad[T, K], swiglu_clamp_value)``. ``arch`` does not change the code."""
    if out_dtype not in OUT_DTYPES or group not in tuple(f"g{p}" for p in GROUPS):
        raise ValueError(f"swiglu_backward: unsupported key {out_dtype!r}, {group!r}")
    return _kernel(out_dtype, int(group[1:]), arch.startswith("sm_"))


def _kernel(out_dtype: str, p: int, cuda: bool):
    import tilelang.language as T

    M = T.dynamic("M")
    H = T.dynamic("H")
    Tn = T.dynamic("T")
    K = T.dynamic("K")
    chunk = THREADS * VEC
    fma = T.ieee_fmaf if cuda else T.fma

    @T.prim_func
    def swiglu_backward(
        x: T.Tensor((M, 2 * H), FP8),
        x_sf: T.Tensor((M, 2 * H // p), "float32"),
        grad_out: T.Tensor((M, H), "bfloat16"),
        weight: T.Tensor((Tn, K), "float32"),
        pos_to_token_topk: T.Tensor((M,), "int32"),
        token_topk_to_pos: T.Tensor((Tn, K), "int32"),
        out: T.Tensor((M, H), out_dtype),
        x_grad: T.Tensor((M, 2 * H), out_dtype),
        weight_grad: T.Tensor((Tn, K), "float32"),
        swiglu_clamp_value: T.float32,
    ):
        # 1. The (token, slot) pairs no row is routed from get a zero gradient.
        # At least one block: a launch of none is an error (T * K == 0 leaves it idle).
        zero_blocks = ceildiv(T, T.max(Tn * K, 1), ZERO_THREADS)
        with T.Kernel(zero_blocks, threads=ZERO_THREADS) as b:
            for i in T.Parallel(ZERO_THREADS):
                e = b * ZERO_THREADS + i
                if e < Tn * K:
                    if token_topk_to_pos[e // K, e % K] < 0:
                        weight_grad[e // K, e % K] = T.float32(0)
        # 2. One block per row. Each step loads a thread's VEC columns of gate, up and grad_out
        # into registers first (one guard per vector, independent of the element, so the loads
        # are 8- and 16-byte vectors: H % P == 0 makes a vector all inside or all outside),
        # computes, then stores; a per-element guard inside one loop kept every access scalar.
        with T.Kernel(M, threads=THREADS) as row:
            T.assume(H % p == 0)
            acc = T.alloc_fragment((THREADS, VEC), "float32")
            part = T.alloc_fragment((THREADS,), "float32")
            dot = T.alloc_fragment((1,), "float32")
            gx = T.alloc_fragment((THREADS, VEC), "float32")
            ux = T.alloc_fragment((THREADS, VEC), "float32")
            gof = T.alloc_fragment((THREADS, VEC), "float32")
            ov = T.alloc_fragment((THREADS, VEC), out_dtype)
            dgv = T.alloc_fragment((THREADS, VEC), out_dtype)
            duv = T.alloc_fragment((THREADS, VEC), out_dtype)
            idx = T.alloc_var("int32", init=pos_to_token_topk[row])
            routed = (idx >= 0) & (idx < Tn * K)
            w = T.alloc_var("float32")
            w = T.if_then_else(routed, weight[idx // K, idx % K], T.float32(0))
            T.clear(acc)
            for c in T.serial(T.ceildiv(H, chunk)):
                for v, e in T.Parallel(THREADS, VEC):
                    base = (c * THREADS + v) * VEC
                    gx[v, e] = T.if_then_else(base < H, T.cast(x[row, base + e], "float32"), 0)
                for v, e in T.Parallel(THREADS, VEC):
                    base = (c * THREADS + v) * VEC
                    ux[v, e] = T.if_then_else(base < H, T.cast(x[row, H + base + e], "float32"), 0)
                for v, e in T.Parallel(THREADS, VEC):
                    base = (c * THREADS + v) * VEC
                    gof[v, e] = T.if_then_else(
                        base < H, T.cast(grad_out[row, base + e], "float32"), 0
                    )
                for v, e in T.Parallel(THREADS, VEC):
                    base = (c * THREADS + v) * VEC
                    inside = base < H
                    g = gx[v, e] * T.if_then_else(inside, x_sf[row, base // p], 0)
                    u = ux[v, e] * T.if_then_else(inside, x_sf[row, (H + base) // p], 0)
                    cg = g > swiglu_clamp_value
                    cu = (u > swiglu_clamp_value) | (u < -swiglu_clamp_value)
                    gc = T.if_then_else(cg, swiglu_clamp_value, g)
                    uc = T.if_then_else(
                        u > swiglu_clamp_value,
                        swiglu_clamp_value,
                        T.if_then_else(u < -swiglu_clamp_value, -swiglu_clamp_value, u),
                    )
                    go = gof[v, e]
                    t = T.float32(1) + T.call_extern("float32", "expf", -gc)
                    s = T.ieee_fdiv(T.float32(1), t)
                    a = T.ieee_fdiv(gc, t) * uc
                    acc[v, e] += go * a
                    ws = go * w * s
                    ov[v, e] = T.cast(a * w, out_dtype)
                    dg = ws * uc * fma(gc, T.float32(1) - s, T.float32(1))
                    dgv[v, e] = T.cast(T.if_then_else(cg, T.float32(0), dg), out_dtype)
                    duv[v, e] = T.cast(T.if_then_else(cu, T.float32(0), ws * gc), out_dtype)
                for v, e in T.Parallel(THREADS, VEC):
                    base = (c * THREADS + v) * VEC
                    if base < H:
                        out[row, base + e] = ov[v, e]
                for v, e in T.Parallel(THREADS, VEC):
                    base = (c * THREADS + v) * VEC
                    if base < H:
                        x_grad[row, base + e] = dgv[v, e]
                for v, e in T.Parallel(THREADS, VEC):
                    base = (c * THREADS + v) * VEC
                    if base < H:
                        x_grad[row, H + base + e] = duv[v, e]
            T.reduce_sum(acc, part, dim=1)  # each thread's VEC partial sums
            T.reduce_sum(part, dot, dim=0)
            if routed:
                weight_grad[idx // K, idx % K] = dot[0]

    return swiglu_backward


def reference(
    x, x_sf, grad_out, weight, pos_to_token_topk, token_topk_to_pos, clamp=None, out_dtype=None
):
    """torch reference, TileKernels' ``swiglu_backward`` semantics: ``(out, x_grad,
    weight_grad)``, out and x_grad float32 (or rounded once to ``out_dtype``). The fma is
    ``moe_reduce.fma_f32`` (correctly rounded on any device); ``weight_grad`` is zero where no
    row names the pair."""
    import torch

    m, h2 = x.shape
    h = h2 // 2
    group = h2 // x_sf.shape[1] if x_sf.shape[1] else h2
    xf = x.float() * x_sf.repeat_interleave(group, dim=1)
    g, u = xf[:, :h], xf[:, h:]
    if clamp is not None:
        cg = g > clamp
        cu = (u > clamp) | (u < -clamp)
        g = torch.where(cg, torch.full_like(g, clamp), g)
        u = torch.where(u > clamp, torch.full_like(u, clamp), u)
        u = torch.where(u < -clamp, torch.full_like(u, -clamp), u)
    flat = weight.reshape(-1).float()
    pos = pos_to_token_topk.long()
    routed = (pos >= 0) & (pos < flat.numel())
    if flat.numel():
        w = torch.where(routed, flat[pos.clamp(0, flat.numel() - 1)], 0.0)
    else:  # no (token, topk) pair: every row is padding
        w = torch.zeros(m, dtype=torch.float32, device=x.device)
    w = w[:, None]
    one = torch.ones((), dtype=torch.float32, device=x.device)
    t = one + torch.exp(-g)
    s = one / t
    a = g / t * u
    go = grad_out.float()
    ws = go * w * s
    dg = ws * u * fma_f32(g, one - s, one.expand_as(g))
    du = ws * g
    if clamp is not None:
        dg = torch.where(cg, torch.zeros_like(dg), dg)
        du = torch.where(cu, torch.zeros_like(du), du)
    out = a * w
    x_grad = torch.cat([dg, du], dim=1)
    weight_grad = torch.zeros_like(flat)
    weight_grad[pos[routed]] = (go * a).sum(dim=1)[routed]
    weight_grad = weight_grad.view(weight.shape)
    if out_dtype is not None:
        out, x_grad = out.to(out_dtype), x_grad.to(out_dtype)
    return out, x_grad, weight_grad


def _constraints(key, spec) -> dict[str, int]:
    """H is a whole number of scale groups (TileKernels requires it too)."""
    return {"H": int(key["group"][1:])}


SPEC = KernelSpec(
    op="swiglu_backward",
    factory=factory,
    keys=tuple({"out_dtype": o, "group": f"g{p}"} for o in OUT_DTYPES for p in GROUPS),
    specs=({},),
    reference=reference,
    constraints=_constraints,
    lowering_classes=BY_GENERATION,
    lowering_reason="a block-wide sum (NamedBarrier from sm_80 on) and fp32 elementwise math "
    "(paired from sm_100 on)",
    doc="out, x_grad, weight_grad of SwiGLU on e4m3 x with per-P scales and per-row routing "
    "weights (TileKernels' swiglu_backward).",
)
