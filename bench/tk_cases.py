"""The cases of bench/tilekernels.py: each TileKernels call, on inputs of the shape of one of
our bench/ops/*.py cases (label and size name that case), or the reason it cannot run.

A `make(tk)` builds the inputs on the GPU and returns the call to time; `tk` is
tilekernels.TileKernels (its `quant`, `moe`, `transpose`, `engram`, `mhc_ops` modules).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent


class Unavailable(Exception):
    """TileKernels has no way to run this case; the message says why."""


@dataclass(frozen=True)
class Case:
    """One timed TileKernels call.

    `op`: the tileaot op (README's catalog name); `label`, `size`: the bench/ops/<bench>.py
    case it stands beside (None: that op's bench file is not in this tree yet, so there is no
    label to pair with); `make(tk)` builds the inputs and returns the call to time."""

    op: str
    label: str | None
    size: str
    make: Callable
    bench: str = ""  # bench/ops/<bench>.py; default: the op's name
    note: str = ""

    @property
    def bench_file(self) -> Path:
        return BENCH / "ops" / f"{self.bench or self.op}.py"


def _bf16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").bfloat16()


def _fp8(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(torch.float8_e4m3fn)


def _grad_fn(fn, *inputs):
    """The backward of TileKernels' autograd op `fn` on `inputs` for a random output gradient:
    the forward runs once here, each timed call is one `torch.autograd.grad`."""
    leaves = [x.detach().requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*leaves)  # a tuple of outputs gets one random gradient each
    g = tuple(map(torch.randn_like, out)) if isinstance(out, tuple) else torch.randn_like(out)
    wrt = [x for x in leaves if x.requires_grad]
    return lambda: torch.autograd.grad(out, wrt, g, retain_graph=True)


# ---- quant -----------------------------------------------------------------------------------


def _per_token_cast(m: int, n: int, fmt: str, g: int, round_sf: bool):
    def make(tk):
        x = _bf16(m, n)
        return lambda: tk.quant.per_token_cast(x, fmt, g, round_sf=round_sf)

    return make


def _per_block_cast(m: int, n: int, round_sf: bool):
    def make(tk):
        x = _bf16(m, n)
        return lambda: tk.quant.per_block_cast(x, "e4m3", (128, 128), round_sf=round_sf)

    return make


def _per_block_cast_lossless(m: int, n: int, out_block: tuple[int, int]):
    """FP4 rows (TileKernels' e2m1 cast, float32 1x32 scales) re-cast to e4m3 blocks."""

    def make(tk):
        x = tk.quant.per_token_cast(_bf16(m, n), "e2m1", 32, round_sf=True)
        fn = tk.quant.per_block_cast_lossless
        return lambda: fn(x, "e4m3", (1, 32), out_block)

    return make


def _per_channel_cast(m: int, n: int, round_sf: bool):
    def make(tk):
        x = _bf16(m, n)
        return lambda: tk.quant.per_channel_cast(x, "e4m3", 128, round_sf=round_sf)

    return make


def _per_channel_cast_fused(t: int, h: int, k: int, e: int, fp8: bool, round_sf: bool):
    """The fused MoE layout's per-channel cast: pos_to_token from get_fused_mapping (made
    once, alignment 128); FP8 rows from TileKernels' g128 cast."""

    def make(tk):
        idx = torch.rand(t, e, device="cuda").topk(k, dim=-1).indices  # int64
        pos_to_token = tk.moe.get_fused_mapping(idx, e, 0, 128)[1]
        x = _bf16(t, h)
        if fp8:
            x = tk.quant.per_token_cast(x, "e4m3", 128)
        n = 128 if fp8 else None
        fn = tk.quant.per_channel_cast_fused
        return lambda: fn(x, "e4m3", 128, round_sf, n, pos_to_token)

    return make


def _per_channel_cast_and_transpose(t: int, h: int, group: int, round_sf: bool):
    def make(tk):
        x = _bf16(t, h)
        fn = tk.quant.per_channel_cast_and_transpose
        return lambda: fn(x, "e4m3", group, round_sf)

    return make


def _cast_back_fp8(m: int, n: int, block: tuple[int, int], fmt: str):
    def make(tk):
        q = _fp8(m, n)
        s = torch.rand(-(-m // block[0]), -(-n // block[1]), device="cuda") + 0.5
        return lambda: tk.quant.cast_back((q, s), fmt, block)

    return make


def _cast_back_fp4(m: int, n: int, g: int):
    def make(tk):
        q, s = tk.quant.per_token_cast(_bf16(m, n), "e2m1", g, round_sf=True)
        return lambda: tk.quant.cast_back((q, s), "bf16", (1, g))

    return make


def _cast_back_e5m6(m: int, n: int, fmt: str):
    def make(tk):
        q, s = tk.quant.per_token_cast(_bf16(m, n), "e5m6", n)
        return lambda: tk.quant.cast_back((q, s), fmt, (1, n), "e5m6")

    return make


def _swiglu_cast(m: int, h: int, weighted: bool = True, clamp=None, round_sf: bool = False):
    def make(tk):
        x = _bf16(m, 2 * h)
        # One weight per row: TileKernels gathers row p's weight at pos_to_token_topk[p].
        rows = torch.arange(m, dtype=torch.int32, device="cuda") if weighted else None
        w = torch.rand(m, 1, device="cuda") if weighted else None
        fn = tk.quant.swiglu_forward_and_per_token_cast
        return lambda: fn(x, "e4m3", 128, rows, w, round_sf=round_sf, swiglu_clamp_value=clamp)

    return make


def _swiglu_channel_cast(t: int, h: int, group: int, clamp=None):
    def make(tk):
        x = _bf16(t, 2 * h)
        fn = tk.quant.swiglu_forward_and_per_channel_cast_and_transpose
        return lambda: fn(x, "e4m3", group, swiglu_clamp_value=clamp)

    return make


def _swiglu_backward(t: int, k: int, h: int, p: int = 128, clamp=None):
    """swiglu_backward_and_per_token_cast: TileKernels' only kernel of the backward, which also
    writes x_grad's e4m3 cast (more bytes than our op's case)."""

    def make(tk):
        m = t * k + t * k // 8
        tk2p = torch.randperm(m, device="cuda")[: t * k].int().view(t, k)
        p2tk = torch.full((m,), -1, dtype=torch.int32, device="cuda")
        p2tk[tk2p.view(-1).long()] = torch.arange(t * k, dtype=torch.int32, device="cuda")
        x = (_fp8(m, 2 * h), torch.rand(m, 2 * h // p, device="cuda"))
        grad_out, w = _bf16(m, h), torch.rand(t, k, device="cuda")
        fn = tk.quant.swiglu_backward_and_per_token_cast
        return lambda: fn(x, grad_out, w, p2tk, tk2p, p, swiglu_clamp_value=clamp)

    return make


# ---- MoE -------------------------------------------------------------------------------------


def _topk_gate(t: int, e: int, k: int):
    def make(tk):
        x = torch.randn(t, e, device="cuda")
        return lambda: tk.moe.topk_gate(x, k)

    return make


def _top2_sum_gate(t: int, e: int, groups: int, kept: int, k: int, shared: int = 0):
    def make(tk):
        x, bias = torch.randn(t, e, device="cuda"), torch.randn(e, device="cuda") * 0.1
        args = (k, kept, groups, shared > 0, shared, 2.5, 0, 1, 0, 1, "sigmoid")
        return lambda: tk.moe.top2_sum_gate(x, bias, *args)

    return make


def _topk_sum_group(t: int, g: int, s: int, n: int, k: int):
    def make(tk):
        x = torch.randn(t, g, s, device="cuda")
        return lambda: tk.moe.topk_sum_and_topk_group_idx(x, n, k)

    return make


def _normalize_weight(t: int, k: int):
    def make(tk):
        w = torch.rand(t, k, device="cuda")
        return lambda: tk.moe.normalize_weight(w)

    return make


def _mask_indices(t: int, k: int):
    def make(tk):
        x = torch.randint(0, 256, (t, k), dtype=torch.int32, device="cuda")
        return lambda: tk.moe.mask_indices_by_tp(x, 256, 8, 1, 2)

    return make


def _group_count(t: int, k: int, g: int):
    def make(tk):
        x = torch.randint(-1, g, (t, k), device="cuda")  # int64, as TileKernels takes
        return lambda: tk.moe.group_count(x, g)

    return make


def _aux_fi(t: int, k: int, e: int):
    def make(tk):
        x = torch.randint(-1, e, (t, k), device="cuda")  # int64, as TileKernels takes
        return lambda: tk.moe.aux_fi(x, e, k)

    return make


def _unique_groups(t: int, k: int, g: int):
    def make(tk):
        x = torch.randint(-1, g, (t, k), device="cuda")  # int64; deduplicated in place, the
        return lambda: tk.moe.inplace_unique_group_indices(x, g)  # repeats then stay -1s

    return make


def _moe_reduce(t: int, h: int, k: int, weighted: bool = True):
    def make(tk):
        y = _bf16(t * k, h)
        pos = torch.randperm(t * k, device="cuda").int().view(t, k)
        w = torch.rand(t, k, device="cuda") if weighted else None
        return lambda: tk.moe.reduce_fused(y, w, pos)

    return make


def _moe_expand(t: int, h: int, k: int, e: int, alignment: int, fp8: bool = False):
    """get_fused_mapping + expand_to_fused: our moe_expand does both. The padded row count is
    found once here (a synced mapping) and passed in, so the timed call neither waits on the
    host nor writes more rows than the routing needs."""

    def make(tk):
        idx = torch.rand(t, e, device="cuda").topk(k, dim=-1).indices  # int64
        x = _fp8(t, h) if fp8 else _bf16(t, h)
        sf = torch.rand(t, h // 128, device="cuda")
        rows = len(tk.moe.get_fused_mapping(idx, e, 0, alignment)[0])

        def call():
            mapping = tk.moe.get_fused_mapping(idx, e, rows, alignment)
            pos_to_expert, token_topk_to_pos = mapping[0], mapping[3]
            if fp8:
                return tk.moe.expand_to_fused_with_sf(
                    (x, sf), 128, token_topk_to_pos, pos_to_expert
                )
            return tk.moe.expand_to_fused(x, token_topk_to_pos, pos_to_expert)

        return call

    return make


def _expand_to_fused_with_sf(t: int, h: int, k: int, e: int, alignment: int, col: bool):
    """expand_to_fused_with_sf alone: the mapping made once, as for expand_to_fused; the
    data and scales from TileKernels' g128 cast (float32 scales)."""

    def make(tk):
        idx = torch.rand(t, e, device="cuda").topk(k, dim=-1).indices  # int64
        xq = tk.quant.per_token_cast(_bf16(t, h), "e4m3", 128)
        mapping = tk.moe.get_fused_mapping(idx, e, 0, alignment)
        pos_to_expert, token_topk_to_pos = mapping[0], mapping[3]
        fn = tk.moe.expand_to_fused_with_sf
        return lambda: fn(xq, 128, token_topk_to_pos, pos_to_expert, col)

    return make


def _expand_to_fused(t: int, h: int, k: int, e: int, alignment: int, fp8: bool = False):
    """expand_to_fused alone: the mapping is made once (get_fused_mapping, synced to the
    rows its experts use), as our case makes it once."""

    def make(tk):
        idx = torch.rand(t, e, device="cuda").topk(k, dim=-1).indices  # int64
        x = _fp8(t, h) if fp8 else _bf16(t, h)
        mapping = tk.moe.get_fused_mapping(idx, e, 0, alignment)
        pos_to_expert, token_topk_to_pos = mapping[0], mapping[3]
        return lambda: tk.moe.expand_to_fused(x, token_topk_to_pos, pos_to_expert)

    return make


def _transpose(*shape: int, dtype=torch.bfloat16):
    def make(tk):
        x = torch.randn(*shape, device="cuda").to(dtype)
        fn = tk.transpose.transpose if len(shape) == 2 else tk.transpose.batched_transpose
        return lambda: fn(x)

    return make


# ---- mHC -------------------------------------------------------------------------------------


def _sinkhorn(t: int, n: int, backward: bool = False):
    def make(tk):
        x = torch.randn(t, n, n, device="cuda")
        fn = tk.mhc_ops.sinkhorn_normalize
        if backward:
            return _grad_fn(lambda v: fn(v, 20, 1e-6), x)
        return lambda: fn(x, 20, 1e-6)

    return make


def _expand_to_mhc(t: int, r: int, h: int, backward: bool = False):
    def make(tk):
        x = _bf16(t, h)
        fn = tk.mhc_ops.expand_to_mhc
        return _grad_fn(lambda v: fn(v, r), x) if backward else (lambda: fn(x, r))

    return make


def _pre_apply_mix(t: int, h: int, backward: bool = False, r: int = 4):
    def make(tk):
        x, mix = _bf16(t, r, h), torch.rand(t, r, 1, device="cuda")
        fn = tk.mhc_ops.mhc_pre_apply_mix
        return _grad_fn(fn, x, mix) if backward else (lambda: fn(x, mix))

    return make


def _mhc_post(t: int, h: int, backward: bool = False, r: int = 4):
    def make(tk):  # TileKernels' model layout [batch, seq, ...]: its backward reads 4-D shapes
        x, residual = _bf16(1, t, h), _bf16(1, t, r, h)
        post, comb = (torch.rand(1, t, r, n, device="cuda") for n in (1, r))
        if not backward:
            return lambda: tk.mhc_ops.mhc_post(x, residual, post, comb)
        g = _bf16(1, t, r, h)
        # fuse_grad_acc=False: return the gradients instead of adding them to .grad
        return lambda: tk.mhc_ops.mhc_post_bwd(x, residual, post, comb, g, fuse_grad_acc=False)

    return make


def _pre_split_mixes(b: int, t: int, backward: bool = False, r: int = 4):
    def make(tk):
        mixes = torch.randn(b, t, (2 + r) * r, device="cuda")
        scale, base = torch.rand(3, device="cuda"), torch.randn((2 + r) * r, device="cuda")
        fn = tk.mhc_ops.mhc_pre_split_mixes
        if backward:
            return _grad_fn(lambda *v: fn(*v, r, 2.0, 1e-6), mixes, scale, base)
        return lambda: fn(mixes, scale, base, r, 2.0, 1e-6)

    return make


def _head_compute_mix(b: int, t: int, backward: bool = False, r: int = 4):
    def make(tk):
        mix = torch.randn(b, t, r, device="cuda")
        scale, base = torch.rand(1, device="cuda"), torch.randn(r, device="cuda")
        fn = tk.mhc_ops.mhc_head_compute_mix
        if backward:
            return _grad_fn(lambda *v: fn(*v, 1e-6), mix, scale, base)
        return lambda: fn(mix, scale, base, 1e-6)

    return make


def _pre_norm_fn(b: int, t: int, h: int, backward: bool = False, r: int = 4):
    def make(tk):
        residual = _bf16(b, t, r, h)
        fn = torch.randn((2 + r) * r, r * h, device="cuda") * (r * h) ** -0.5
        op = tk.mhc_ops.mhc_pre_norm_fn
        if backward:  # fuse_grad_acc=False: no mhc_post gradient to add into here
            return _grad_fn(lambda x, f: op(x, f, None, 1e-6, False), residual, fn)
        return lambda: op(residual, fn, None, 1e-6)

    return make


# ---- Engram ----------------------------------------------------------------------------------

CLAMP = 1e-6  # our bench cases' clamp_min(1e-6), TileKernels' clamp_value


def _engram_inputs(tk, t: int, g: int, h: int):
    """h, k [T, G, H]; v [T, H] (TileKernels' layout: one value row per token); weights
    [G, H] bf16 and their fp32 product (TileKernels' fused_weight)."""
    hs, k, v = _bf16(t, g, h), _bf16(t, g, h), _bf16(t, h)
    w_h, w_k = ((1 + 0.1 * torch.randn(g, h, device="cuda")).bfloat16() for _ in range(2))
    return hs, k, v, w_h, w_k, tk.engram.fused_weight(w_h, w_k)


def _engram_gate(t: int, g: int, h: int):
    def make(tk):
        hs, k, v, _, _, wf = _engram_inputs(tk, t, g, h)
        # save_for_backward: it writes the gate (and dot, rstd), as ours with return_gate
        return lambda: tk.engram.engram_gate_fwd(hs, k, v, wf, 1e-6, CLAMP, True)

    return make


def _engram_backward_inputs(tk, t: int, g: int, h: int):
    hs, k, v, w_h, w_k, wf = _engram_inputs(tk, t, g, h)
    _, dot, gate, rstd_x, rstd_k = tk.engram.engram_gate_fwd(hs, k, v, wf, 1e-6, CLAMP, True)
    args = (_bf16(t, g, h), hs, k, v, wf, dot, gate, rstd_x, rstd_k, CLAMP)
    return args, w_h, w_k


def _engram_gate_backward(t: int, g: int, h: int):
    """engram_gate_bwd, then grad_w_reduce: the weight gradients ours returns too."""

    def make(tk):
        args, w_h, w_k = _engram_backward_inputs(tk, t, g, h)
        gw_h, gw_k = (torch.zeros(g, h, device="cuda") for _ in range(2))

        def call():
            *grads, partial = tk.engram.engram_gate_bwd(*args)
            tk.engram.grad_w_reduce(partial, w_h, w_k, gw_h, gw_k)
            return grads

        return call

    return make


def _grad_w_reduce(t: int, g: int, h: int):
    def make(tk):
        args, w_h, w_k = _engram_backward_inputs(tk, t, g, h)
        partial = tk.engram.engram_gate_bwd(*args)[-1]
        gw_h, gw_k = (torch.zeros(g, h, device="cuda") for _ in range(2))
        return lambda: tk.engram.grad_w_reduce(partial, w_h, w_k, gw_h, gw_k)

    return make


def _fused_weight(g: int, h: int):
    def make(tk):
        w_h, w_k = _bf16(g, h), _bf16(g, h)
        return lambda: tk.engram.fused_weight(w_h, w_k)

    return make


def _engram_hash(t: int, n: int = 3, layers: int = 2, tables: int = 8):
    def make(tk):
        ids = torch.randint(0, 129280, (t, n), dtype=torch.int32, device="cuda")
        mult = torch.randint(1, 1 << 20, (layers, n), device="cuda") * 2 + 1  # odd, int64
        vocab = torch.randint(100_000, 200_000, (layers, n - 1, tables), dtype=torch.int32)
        vocab = vocab.cuda()
        offsets = torch.cumsum(vocab.view(layers, -1), -1, dtype=torch.int32) - vocab.view(
            layers, -1
        )
        return lambda: tk.engram.engram_hash(ids, mult, vocab, offsets)

    return make


def _unavailable(reason: str):
    def make(tk):
        raise Unavailable(reason)

    return make


NO_FP4_E4M3 = "TileKernels' e2m1 cast has fp32 or packed-UE8M0 scales, no E4M3 scales"
V_LAYOUT = "TileKernels' layout: v [T, H], weights [G, H] (ours here: v [T, G, H], weights [H])"
TOPK_NOTE = "TileKernels' topk_gate: the logits' top-k indices, no weights"
NO_SIGMOID = "TileKernels' topk_gate returns no sigmoid weights (its sigmoid router: top2_sum_gate)"
NO_FP32_OUT = "TileKernels' reduce_fused writes x's dtype or e4m3: no fp32 out of bf16"
EXPAND = "get_fused_mapping (row count given: no host sync) + expand_to_fused"
ENGRAM_BWD = f"engram_gate_bwd + grad_w_reduce; {V_LAYOUT}"
GWR = "grad_w_reduce of engram_gate_bwd's partials [SMs, G, H]"
AUTOGRAD = "through autograd"


def _op(op: str, *rows: tuple, bench: str = "") -> list[Case]:
    """The cases of one op: rows of (label, size, make[, note])."""
    return [Case(op, label, size, make, bench, *note) for label, size, make, *note in rows]


X, X2 = "32768x7168", "32768x2*7168"
PTC8, PTC8R = "per_token_cast_fp8 bf16 g128", "per_token_cast_fp8 bf16 g128 round_sf"
PBC, PTC4 = "per_block_cast_fp8 bf16", "per_token_cast_fp4 bf16 g32 ue8m0"
PCC, PTE = "per_channel_cast_fp8 bf16", "per_token_cast_e5m6 bf16"
PCF = "per_channel_cast_fused bf16 E256 a128"
PCT = "per_channel_cast_and_transpose bf16"
SPCT, SPCT_SIZE = "swiglu_per_channel_cast_and_transpose bf16", "32768x2*2048"
PBL, PBL1 = (
    "per_block_cast_lossless e2m1 1x32 -> 128x128",
    "per_block_cast_lossless e2m1 1x32 -> 1x128",
)
CB, SW, SWW = (
    "cast_back fp8 g128 -> bf16",
    "swiglu_per_token_cast_fp8 bf16",
    "swiglu_per_token_cast_fp8 bf16 w",
)
T2, T2S, TSG = "top2_sum_gate dsv3 k8", "top2_sum_gate kimi-k2 k8", "topk_sum_and_topk_group_idx"
EXP16, EXP128 = "moe_expand bf16 E256 a16", "moe_expand bf16 E256 a128"
ETF = "expand_to_fused bf16 E256 a128"
ETFS = "expand_to_fused_with_sf e4m3 g128 E256 a128"
SK4, SK4B = "sinkhorn_normalize n4 r20", "sinkhorn_normalize_backward n4 r20"
M, MB = "8192x4x7168", "128x4x4096"
SWB, SWB_SIZE = "swiglu_backward e4m3 g128 -> bf16", "4096x8x2*2048"
SWB_NOTE = "TileKernels' fused kernel also writes x_grad's e4m3 cast"
# fmt: off
CASES: list[Case] = [
    *_op("per_token_cast_fp8",
         (PTC8, X, _per_token_cast(32768, 7168, "e4m3", 128, False)),
         (PTC8, "128x4096", _per_token_cast(128, 4096, "e4m3", 128, False)),
         (PTC8R, X, _per_token_cast(32768, 7168, "e4m3", 128, True)),
         (PTC8R, "4096x7168", _per_token_cast(4096, 7168, "e4m3", 128, True))),
    *_op("per_block_cast_fp8",
         (PBC, X, _per_block_cast(32768, 7168, False)),
         (PBC, "128x4096", _per_block_cast(128, 4096, False)),
         (PBC + " round_sf", X, _per_block_cast(32768, 7168, True))),
    *_op("per_channel_cast_fp8",
         (PCC, X, _per_channel_cast(32768, 7168, False)),
         (PCC, "128x4096", _per_channel_cast(128, 4096, False)),
         (PCC + " round_sf", X, _per_channel_cast(32768, 7168, True))),
    *_op("per_block_cast_lossless",
         (PBL, X, _per_block_cast_lossless(32768, 7168, (128, 128))),
         (PBL, "4096x7168", _per_block_cast_lossless(4096, 7168, (128, 128))),
         (PBL1, X, _per_block_cast_lossless(32768, 7168, (1, 128)))),
    *_op("per_channel_cast_fused",
         (PCF, "4096x7168 k8", _per_channel_cast_fused(4096, 7168, 8, 256, False, False)),
         (PCF + " round_sf", "4096x7168 k8",
          _per_channel_cast_fused(4096, 7168, 8, 256, False, True)),
         ("per_channel_cast_fused e4m3 g128 E256 a128", "4096x7168 k8",
          _per_channel_cast_fused(4096, 7168, 8, 256, True, False)),
         (PCF, "128x7168 k8", _per_channel_cast_fused(128, 7168, 8, 256, False, False))),
    *_op("per_channel_cast_and_transpose",
         (PCT + " g128", X, _per_channel_cast_and_transpose(32768, 7168, 128, False)),
         (PCT + " g128", "4096x7168", _per_channel_cast_and_transpose(4096, 7168, 128, False)),
         (PCT + " g32", X, _per_channel_cast_and_transpose(32768, 7168, 32, False)),
         (PCT + " g128 round_sf", X, _per_channel_cast_and_transpose(32768, 7168, 128, True))),
    *_op("swiglu_per_channel_cast_and_transpose",
         (SPCT + " g128", SPCT_SIZE, _swiglu_channel_cast(32768, 2048, 128)),
         (SPCT + " g128", "4096x2*7168", _swiglu_channel_cast(4096, 7168, 128)),
         (SPCT + " g32", SPCT_SIZE, _swiglu_channel_cast(32768, 2048, 32)),
         (SPCT + " g128 clamp", SPCT_SIZE, _swiglu_channel_cast(32768, 2048, 128, 7.0))),
    *_op("per_token_cast_e5m6",
         (PTE, X, _per_token_cast(32768, 7168, "e5m6", 7168, False)),
         (PTE, "128x4096", _per_token_cast(128, 4096, "e5m6", 4096, False)),
         (PTE + " round_sf", X, _per_token_cast(32768, 7168, "e5m6", 7168, True))),
    *_op("per_token_cast_fp4",
         (PTC4, X, _per_token_cast(32768, 7168, "e2m1", 32, True)),
         (PTC4, "128x4096", _per_token_cast(128, 4096, "e2m1", 32, True)),
         ("per_token_cast_fp4 bf16 g16 e4m3", X, _unavailable(NO_FP4_E4M3))),
    *_op("cast_back",
         ("cast_back_fp4 bf16 g32 ue8m0", X, _cast_back_fp4(32768, 7168, 32)),
         ("cast_back_fp4 bf16 g16 e4m3", "128x4096", _unavailable(NO_FP4_E4M3)),
         bench="per_token_cast_fp4"),
    *_op("cast_back",
         (CB, X, _cast_back_fp8(32768, 7168, (1, 128), "bf16")),
         (CB, "128x4096", _cast_back_fp8(128, 4096, (1, 128), "bf16")),
         ("cast_back fp8 block128 -> bf16", X, _cast_back_fp8(32768, 7168, (128, 128), "bf16")),
         ("cast_back fp8 token -> fp32", X, _cast_back_fp8(32768, 7168, (1, 7168), "fp32"))),
    *_op("cast_back_e5m6",
         ("cast_back_e5m6 -> bf16", X, _cast_back_e5m6(32768, 7168, "bf16")),
         ("cast_back_e5m6 -> bf16", "128x4096", _cast_back_e5m6(128, 4096, "bf16")),
         ("cast_back_e5m6 -> fp32", X, _cast_back_e5m6(32768, 7168, "fp32"))),
    *_op("swiglu_per_token_cast_fp8",
         (SWW, X2, _swiglu_cast(32768, 7168)),
         (SWW + " clamp", X2, _swiglu_cast(32768, 7168, clamp=7.0)),
         (SW, "32768x2*2048", _swiglu_cast(32768, 2048, weighted=False)),
         (SWW, "32768x2*2048", _swiglu_cast(32768, 2048)),
         (SWW + " (generic H)", "32768x2*1408", _swiglu_cast(32768, 1408)),
         (SWW, "128x2*2048", _swiglu_cast(128, 2048)),
         (SWW + " round_sf", X2, _swiglu_cast(32768, 7168, round_sf=True))),
    *_op("swiglu_backward",
         (SWB, SWB_SIZE, _swiglu_backward(4096, 8, 2048), SWB_NOTE),
         (SWB + " clamp", SWB_SIZE, _swiglu_backward(4096, 8, 2048, clamp=10.0), SWB_NOTE),
         ("swiglu_backward e4m3 g32 -> fp32", SWB_SIZE, _swiglu_backward(4096, 8, 2048, 32),
          SWB_NOTE),
         (SWB, "16x8x2*2048", _swiglu_backward(16, 8, 2048), SWB_NOTE)),
    *_op("topk_gate",
         ("topk_gate softmax k8", "32768x256", _topk_gate(32768, 256, 8), TOPK_NOTE),
         ("topk_gate softmax k8", "128x256", _topk_gate(128, 256, 8), TOPK_NOTE),
         ("topk_gate sigmoid k8", "32768x256", _unavailable(NO_SIGMOID))),
    *_op("top2_sum_gate",
         (T2, "32768x256", _top2_sum_gate(32768, 256, 8, 4, 8)),
         (T2, "4096x256", _top2_sum_gate(4096, 256, 8, 4, 8)),
         (T2 + "+1 shared", "32768x256", _top2_sum_gate(32768, 256, 8, 4, 8, 1)),
         (T2S, "32768x384", _top2_sum_gate(32768, 384, 1, 1, 8))),
    *_op(TSG,
         (TSG + " dsv3", "32768x8x32", _topk_sum_group(32768, 8, 32, 2, 4)),
         (TSG + " dsv3", "4096x8x32", _topk_sum_group(4096, 8, 32, 2, 4)),
         (TSG + " 72/12 top1", "32768x12x6", _topk_sum_group(32768, 12, 6, 1, 4))),
    *_op("normalize_weight",
         ("normalize_weight k8", "32768x8", _normalize_weight(32768, 8)),
         ("normalize_weight k8", "4096x8", _normalize_weight(4096, 8))),
    *_op("mask_indices_by_tp",
         ("mask_indices_by_tp k8", "32768x8", _mask_indices(32768, 8)),
         ("mask_indices_by_tp k8", "4096x8", _mask_indices(4096, 8))),
    *_op("group_count",
         ("group_count e256 k8", "32768x8", _group_count(32768, 8, 256)),
         ("group_count e256 k8", "4096x8", _group_count(4096, 8, 256))),
    *_op("aux_fi",
         ("aux_fi e256 k8", "32768x8", _aux_fi(32768, 8, 256)),
         ("aux_fi e256 k8", "4096x8", _aux_fi(4096, 8, 256))),
    *_op("inplace_unique_group_indices",
         ("inplace_unique_group_indices g8 k4", "32768x4", _unique_groups(32768, 4, 8)),
         ("inplace_unique_group_indices g8 k4", "4096x4", _unique_groups(4096, 4, 8))),
    *_op("moe_reduce",
         ("moe_reduce bf16 weighted", "32768x7168 k8", _moe_reduce(32768, 7168, 8)),
         ("moe_reduce bf16 sum", "32768x7168 k8", _moe_reduce(32768, 7168, 8, weighted=False)),
         ("moe_reduce bf16->fp32 weighted", "4096x7168 k8", _unavailable(NO_FP32_OUT)),
         ("moe_reduce bf16 weighted", "128x7168 k8", _moe_reduce(128, 7168, 8))),
    *_op("moe_expand",
         (EXP16, "32768x7168 k8", _moe_expand(32768, 7168, 8, 256, 16), EXPAND),
         (EXP128, "32768x7168 k8", _moe_expand(32768, 7168, 8, 256, 128), EXPAND),
         ("moe_expand e4m3 E256 a128", "32768x7168 k8",
          _moe_expand(32768, 7168, 8, 256, 128, fp8=True), EXPAND + " (with_sf)"),
         (EXP16, "128x7168 k8", _moe_expand(128, 7168, 8, 256, 16), EXPAND)),
    *_op("expand_to_fused",
         (ETF, "32768x7168 k8", _expand_to_fused(32768, 7168, 8, 256, 128)),
         ("expand_to_fused e4m3 E256 a128", "32768x7168 k8",
          _expand_to_fused(32768, 7168, 8, 256, 128, fp8=True)),
         (ETF, "128x7168 k8", _expand_to_fused(128, 7168, 8, 256, 128))),
    *_op("expand_to_fused_with_sf",
         (ETFS, "32768x7168 k8", _expand_to_fused_with_sf(32768, 7168, 8, 256, 128, False)),
         ("expand_to_fused_with_sf e4m3 g128 col-major E256 a128", "32768x7168 k8",
          _expand_to_fused_with_sf(32768, 7168, 8, 256, 128, True)),
         (ETFS, "128x7168 k8", _expand_to_fused_with_sf(128, 7168, 8, 256, 128, False))),
    *_op("transpose",
         ("transpose bf16", X, _transpose(32768, 7168)),
         ("transpose e4m3", X, _transpose(32768, 7168, dtype=torch.float8_e4m3fn)),
         ("transpose fp32", "8192x7168", _transpose(8192, 7168, dtype=torch.float32)),
         ("transpose bf16", "8x1024x1030", _transpose(8, 1024, 1030)),
         ("transpose bf16", "128x4096", _transpose(128, 4096))),
    *_op("sinkhorn_normalize",
         (SK4, "32768x4x4", _sinkhorn(32768, 4)),
         ("sinkhorn_normalize n8 r20", "32768x8x8", _sinkhorn(32768, 8)),
         (SK4, "128x4x4", _sinkhorn(128, 4))),
    *_op("sinkhorn_normalize_backward",
         (SK4B, "32768x4x4", _sinkhorn(32768, 4, True), AUTOGRAD),
         ("sinkhorn_normalize_backward n8 r20", "32768x8x8", _sinkhorn(32768, 8, True), AUTOGRAD),
         bench="sinkhorn_normalize"),
    *_op("expand_to_mhc",
         ("expand_to_mhc r4", "8192x7168", _expand_to_mhc(8192, 4, 7168)),
         ("expand_to_mhc r4", "128x4096", _expand_to_mhc(128, 4, 4096))),
    *_op("expand_to_mhc_backward",
         ("expand_to_mhc_backward r4", M, _expand_to_mhc(8192, 4, 7168, True), AUTOGRAD),
         ("expand_to_mhc_backward r4", MB, _expand_to_mhc(128, 4, 4096, True), AUTOGRAD),
         bench="expand_to_mhc"),
    *_op("mhc_pre_apply_mix",
         ("mhc_pre_apply_mix r4", M, _pre_apply_mix(8192, 7168)),
         ("mhc_pre_apply_mix r4", MB, _pre_apply_mix(128, 4096))),
    *_op("mhc_pre_apply_mix_backward",
         ("mhc_pre_apply_mix_backward r4", M, _pre_apply_mix(8192, 7168, True), AUTOGRAD),
         ("mhc_pre_apply_mix_backward r4", MB, _pre_apply_mix(128, 4096, True), AUTOGRAD),
         bench="mhc_pre_apply_mix"),
    *_op("mhc_post",
         ("mhc_post r4", M, _mhc_post(8192, 7168)),
         ("mhc_post r4", MB, _mhc_post(128, 4096))),
    *_op("mhc_post_backward",
         ("mhc_post_backward r4", M, _mhc_post(8192, 7168, True), "mhc_post_bwd"),
         ("mhc_post_backward r4", MB, _mhc_post(128, 4096, True), "mhc_post_bwd"),
         bench="mhc_post"),
    *_op("engram_gate",
         ("engram_gate bf16 shared v, weights [G, H]", "32768x4x7168",
          _engram_gate(32768, 4, 7168), "engram_gate_fwd, save_for_backward")),
    *_op("engram_gate_backward",
         ("engram_gate_backward bf16", M, _engram_gate_backward(8192, 4, 7168), ENGRAM_BWD),
         ("engram_gate_backward bf16", MB, _engram_gate_backward(128, 4, 4096), ENGRAM_BWD),
         bench="engram_gate"),
    *_op("engram_grad_w_reduce",
         ("engram_grad_w_reduce p132 g4", "4x7168", _grad_w_reduce(8192, 4, 7168), GWR),
         ("engram_grad_w_reduce p132 g4", "4x4096", _grad_w_reduce(128, 4, 4096), GWR)),
    *_op("engram_fused_weight",
         ("engram_fused_weight bf16", "4x7168", _fused_weight(4, 7168)),
         ("engram_fused_weight bf16", "64x7168", _fused_weight(64, 7168))),
    *_op("engram_hash", ("engram_hash n3 l2 e8", "32768", _engram_hash(32768))),
    *_op("mhc_pre_split_mixes",
         ("mhc_pre_split_mixes r4", "4x8192x24", _pre_split_mixes(4, 8192))),
    *_op("mhc_pre_split_mixes_backward",
         ("mhc_pre_split_mixes_backward r4", "4x8192x24", _pre_split_mixes(4, 8192, True),
          AUTOGRAD),
         bench="mhc_pre_split_mixes"),
    *_op("mhc_head_compute_mix",
         ("mhc_head_compute_mix r4", "4x8192x4", _head_compute_mix(4, 8192))),
    *_op("mhc_head_compute_mix_backward",
         ("mhc_head_compute_mix_backward r4", "4x8192x4", _head_compute_mix(4, 8192, True),
          AUTOGRAD),
         bench="mhc_head_compute_mix"),
    *_op("mhc_pre_norm_fn",
         ("mhc_pre_norm_fn r4", M, _pre_norm_fn(1, 8192, 7168)),
         ("mhc_pre_norm_fn r4", MB, _pre_norm_fn(1, 128, 4096))),
    *_op("mhc_pre_norm_fn_backward",
         ("mhc_pre_norm_fn_backward r4", M, _pre_norm_fn(1, 8192, 7168, True), AUTOGRAD),
         ("mhc_pre_norm_fn_backward r4", MB, _pre_norm_fn(1, 128, 4096, True), AUTOGRAD),
         bench="mhc_pre_norm_fn"),
]
# fmt: on
