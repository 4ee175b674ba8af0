"""TileKernels' own kernels, timed at our benchmark cases' shapes, beside tileaot's figures.

    python bench/tilekernels.py [--suite SUITE.json] [--out bench/results] [--match REGEX]
                                [--cache DIR] [--json PATH]

For every op tileaot shares with DeepSeek's TileKernels (`tile-kernels` 1.0.0: README's
"TileKernels counterparts" section, plus the ops landing on other branches), this calls
TileKernels' public function, JIT-compiled by TileLang on its first call, on inputs of the
shape of one of our bench/ops/*.py cases. Times come from bench/timing.py, the code that
times our own cases (warm-up, L2 flushed by a read before each repetition, CUDA events,
median), so the two columns differ only in the kernel. The first call (synchronised) is
reported apart: with the default empty TileLang cache that is the cold JIT compile.

With --suite (the JSON bench/suite.py wrote on the same machine), each row also gets our
median for the same case (label and size) and the ratio TileKernels / tileaot (> 1: ours is
faster). Writes <out>/<gpu>-<date>-tilekernels.json and .md. A case whose TileKernels function
cannot run (an option it lacks, a layout it does not take) is listed with the reason; a case
that fails is listed with its error. No GPU or no importable tile_kernels: one line, exit 0.
On the GPU machine: `bash scripts/gpu_check.sh tkbench` (tilelang and tile-kernels from the
carried tarball).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))  # timing, suite: also when imported by the tests

from suite import _version, gpu_slug  # noqa: E402
from timing import measure  # noqa: E402

README = ROOT / "README.md"
SWIGLU_MODULE = "tile_kernels.quant.swiglu_forward_and_per_token_cast_kernel"


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
    out = fn(*leaves)
    g = torch.randn_like(out)
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


def _swiglu_cast(m: int, h: int, weighted: bool = True, clamp=None, round_sf: bool = False):
    def make(tk):
        x = _bf16(m, 2 * h)
        # One weight per row: TileKernels gathers row p's weight at pos_to_token_topk[p].
        rows = torch.arange(m, dtype=torch.int32, device="cuda") if weighted else None
        w = torch.rand(m, 1, device="cuda") if weighted else None
        fn = tk.quant.swiglu_forward_and_per_token_cast
        return lambda: fn(x, "e4m3", 128, rows, w, round_sf=round_sf, swiglu_clamp_value=clamp)

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


def _pre_split_mixes(b: int, t: int, r: int = 4):
    def make(tk):
        mixes = torch.randn(b, t, (2 + r) * r, device="cuda")
        scale, base = torch.rand(3, device="cuda"), torch.randn((2 + r) * r, device="cuda")
        return lambda: tk.mhc_ops.mhc_pre_split_mixes(mixes, scale, base, r, 2.0, 1e-6)

    return make


def _head_compute_mix(b: int, t: int, r: int = 4):
    def make(tk):
        mix = torch.randn(b, t, r, device="cuda")
        scale, base = torch.rand(1, device="cuda"), torch.randn(r, device="cuda")
        return lambda: tk.mhc_ops.mhc_head_compute_mix(mix, scale, base, 1e-6)

    return make


def _pre_norm_fn(b: int, t: int, h: int, r: int = 4):
    def make(tk):
        residual = _bf16(b, t, r, h)
        fn = torch.randn((2 + r) * r, r * h, device="cuda") * (r * h) ** -0.5
        return lambda: tk.mhc_ops.mhc_pre_norm_fn(residual, fn, None, 1e-6)

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
X = "32768x7168"
CASES: list[Case] = [
    Case(
        "per_token_cast_fp8",
        "per_token_cast_fp8 bf16 g128",
        X,
        _per_token_cast(32768, 7168, "e4m3", 128, False),
    ),
    Case(
        "per_token_cast_fp8",
        "per_token_cast_fp8 bf16 g128",
        "128x4096",
        _per_token_cast(128, 4096, "e4m3", 128, False),
    ),
    Case(
        "per_token_cast_fp8",
        "per_token_cast_fp8 bf16 g128 round_sf",
        X,
        _per_token_cast(32768, 7168, "e4m3", 128, True),
    ),
    Case(
        "per_token_cast_fp8",
        "per_token_cast_fp8 bf16 g128 round_sf",
        "4096x7168",
        _per_token_cast(4096, 7168, "e4m3", 128, True),
    ),
    Case("per_block_cast_fp8", "per_block_cast_fp8 bf16", X, _per_block_cast(32768, 7168, False)),
    Case(
        "per_block_cast_fp8",
        "per_block_cast_fp8 bf16",
        "128x4096",
        _per_block_cast(128, 4096, False),
    ),
    Case(
        "per_block_cast_fp8",
        "per_block_cast_fp8 bf16 round_sf",
        X,
        _per_block_cast(32768, 7168, True),
    ),
    Case(
        "per_token_cast_fp4",
        "per_token_cast_fp4 bf16 g32 ue8m0",
        X,
        _per_token_cast(32768, 7168, "e2m1", 32, True),
    ),
    Case(
        "per_token_cast_fp4",
        "per_token_cast_fp4 bf16 g32 ue8m0",
        "128x4096",
        _per_token_cast(128, 4096, "e2m1", 32, True),
    ),
    Case("per_token_cast_fp4", "per_token_cast_fp4 bf16 g16 e4m3", X, _unavailable(NO_FP4_E4M3)),
    Case(
        "cast_back",
        "cast_back_fp4 bf16 g32 ue8m0",
        X,
        _cast_back_fp4(32768, 7168, 32),
        bench="per_token_cast_fp4",
    ),
    Case(
        "cast_back",
        "cast_back_fp4 bf16 g16 e4m3",
        "128x4096",
        _unavailable(NO_FP4_E4M3),
        bench="per_token_cast_fp4",
    ),
    Case(
        "cast_back", "cast_back fp8 g128 -> bf16", X, _cast_back_fp8(32768, 7168, (1, 128), "bf16")
    ),
    Case(
        "cast_back",
        "cast_back fp8 g128 -> bf16",
        "128x4096",
        _cast_back_fp8(128, 4096, (1, 128), "bf16"),
    ),
    Case(
        "cast_back",
        "cast_back fp8 block128 -> bf16",
        X,
        _cast_back_fp8(32768, 7168, (128, 128), "bf16"),
    ),
    Case(
        "cast_back",
        "cast_back fp8 token -> fp32",
        X,
        _cast_back_fp8(32768, 7168, (1, 7168), "fp32"),
    ),
    Case(
        "swiglu_per_token_cast_fp8",
        "swiglu_per_token_cast_fp8 bf16 w",
        "32768x2*7168",
        _swiglu_cast(32768, 7168),
    ),
    Case(
        "swiglu_per_token_cast_fp8",
        "swiglu_per_token_cast_fp8 bf16 w clamp",
        "32768x2*7168",
        _swiglu_cast(32768, 7168, clamp=7.0),
    ),
    Case(
        "swiglu_per_token_cast_fp8",
        "swiglu_per_token_cast_fp8 bf16",
        "32768x2*2048",
        _swiglu_cast(32768, 2048, weighted=False),
    ),
    Case(
        "swiglu_per_token_cast_fp8",
        "swiglu_per_token_cast_fp8 bf16 w",
        "32768x2*2048",
        _swiglu_cast(32768, 2048),
    ),
    Case(
        "swiglu_per_token_cast_fp8",
        "swiglu_per_token_cast_fp8 bf16 w (generic H)",
        "32768x2*1408",
        _swiglu_cast(32768, 1408),
    ),
    Case(
        "swiglu_per_token_cast_fp8",
        "swiglu_per_token_cast_fp8 bf16 w",
        "128x2*2048",
        _swiglu_cast(128, 2048),
    ),
    Case(
        "swiglu_per_token_cast_fp8",
        "swiglu_per_token_cast_fp8 bf16 w round_sf",
        "32768x2*7168",
        _swiglu_cast(32768, 7168, round_sf=True),
    ),
    Case(
        "topk_gate", "topk_gate softmax k8", "32768x256", _topk_gate(32768, 256, 8), note=TOPK_NOTE
    ),
    Case("topk_gate", "topk_gate softmax k8", "128x256", _topk_gate(128, 256, 8), note=TOPK_NOTE),
    Case("topk_gate", "topk_gate sigmoid k8", "32768x256", _unavailable(NO_SIGMOID)),
    Case(
        "top2_sum_gate", "top2_sum_gate dsv3 k8", "32768x256", _top2_sum_gate(32768, 256, 8, 4, 8)
    ),
    Case("top2_sum_gate", "top2_sum_gate dsv3 k8", "4096x256", _top2_sum_gate(4096, 256, 8, 4, 8)),
    Case(
        "top2_sum_gate",
        "top2_sum_gate dsv3 k8+1 shared",
        "32768x256",
        _top2_sum_gate(32768, 256, 8, 4, 8, 1),
    ),
    Case(
        "top2_sum_gate",
        "top2_sum_gate kimi-k2 k8",
        "32768x384",
        _top2_sum_gate(32768, 384, 1, 1, 8),
    ),
    Case(
        "topk_sum_and_topk_group_idx",
        "topk_sum_and_topk_group_idx dsv3",
        "32768x8x32",
        _topk_sum_group(32768, 8, 32, 2, 4),
    ),
    Case(
        "topk_sum_and_topk_group_idx",
        "topk_sum_and_topk_group_idx dsv3",
        "4096x8x32",
        _topk_sum_group(4096, 8, 32, 2, 4),
    ),
    Case(
        "topk_sum_and_topk_group_idx",
        "topk_sum_and_topk_group_idx 72/12 top1",
        "32768x12x6",
        _topk_sum_group(32768, 12, 6, 1, 4),
    ),
    Case("normalize_weight", "normalize_weight k8", "32768x8", _normalize_weight(32768, 8)),
    Case("normalize_weight", "normalize_weight k8", "4096x8", _normalize_weight(4096, 8)),
    Case("mask_indices_by_tp", "mask_indices_by_tp k8", "32768x8", _mask_indices(32768, 8)),
    Case("mask_indices_by_tp", "mask_indices_by_tp k8", "4096x8", _mask_indices(4096, 8)),
    Case("group_count", "group_count e256 k8", "32768x8", _group_count(32768, 8, 256)),
    Case("group_count", "group_count e256 k8", "4096x8", _group_count(4096, 8, 256)),
    Case("moe_reduce", "moe_reduce bf16 weighted", "32768x7168 k8", _moe_reduce(32768, 7168, 8)),
    Case(
        "moe_reduce",
        "moe_reduce bf16 sum",
        "32768x7168 k8",
        _moe_reduce(32768, 7168, 8, weighted=False),
    ),
    Case("moe_reduce", "moe_reduce bf16->fp32 weighted", "4096x7168 k8", _unavailable(NO_FP32_OUT)),
    Case("moe_reduce", "moe_reduce bf16 weighted", "128x7168 k8", _moe_reduce(128, 7168, 8)),
    Case(
        "moe_expand",
        "moe_expand bf16 E256 a16",
        "32768x7168 k8",
        _moe_expand(32768, 7168, 8, 256, 16),
        note=EXPAND,
    ),
    Case(
        "moe_expand",
        "moe_expand bf16 E256 a128",
        "32768x7168 k8",
        _moe_expand(32768, 7168, 8, 256, 128),
        note=EXPAND,
    ),
    Case(
        "moe_expand",
        "moe_expand e4m3 E256 a128",
        "32768x7168 k8",
        _moe_expand(32768, 7168, 8, 256, 128, fp8=True),
        note=EXPAND + " (with_sf)",
    ),
    Case(
        "moe_expand",
        "moe_expand bf16 E256 a16",
        "128x7168 k8",
        _moe_expand(128, 7168, 8, 256, 16),
        note=EXPAND,
    ),
    Case("transpose", "transpose bf16", X, _transpose(32768, 7168)),
    Case("transpose", "transpose e4m3", X, _transpose(32768, 7168, dtype=torch.float8_e4m3fn)),
    Case("transpose", "transpose fp32", "8192x7168", _transpose(8192, 7168, dtype=torch.float32)),
    Case("transpose", "transpose bf16", "8x1024x1030", _transpose(8, 1024, 1030)),
    Case("transpose", "transpose bf16", "128x4096", _transpose(128, 4096)),
    Case("sinkhorn_normalize", "sinkhorn_normalize n4 r20", "32768x4x4", _sinkhorn(32768, 4)),
    Case("sinkhorn_normalize", "sinkhorn_normalize n8 r20", "32768x8x8", _sinkhorn(32768, 8)),
    Case("sinkhorn_normalize", "sinkhorn_normalize n4 r20", "128x4x4", _sinkhorn(128, 4)),
    Case(
        "sinkhorn_normalize_backward",
        "sinkhorn_normalize_backward n4 r20",
        "32768x4x4",
        _sinkhorn(32768, 4, True),
        bench="sinkhorn_normalize",
        note="through autograd",
    ),
    Case(
        "sinkhorn_normalize_backward",
        "sinkhorn_normalize_backward n8 r20",
        "32768x8x8",
        _sinkhorn(32768, 8, True),
        bench="sinkhorn_normalize",
        note="through autograd",
    ),
    Case("expand_to_mhc", "expand_to_mhc r4", "8192x7168", _expand_to_mhc(8192, 4, 7168)),
    Case("expand_to_mhc", "expand_to_mhc r4", "128x4096", _expand_to_mhc(128, 4, 4096)),
    Case(
        "expand_to_mhc_backward",
        "expand_to_mhc_backward r4",
        "8192x4x7168",
        _expand_to_mhc(8192, 4, 7168, True),
        bench="expand_to_mhc",
        note="through autograd",
    ),
    Case(
        "expand_to_mhc_backward",
        "expand_to_mhc_backward r4",
        "128x4x4096",
        _expand_to_mhc(128, 4, 4096, True),
        bench="expand_to_mhc",
        note="through autograd",
    ),
    Case("mhc_pre_apply_mix", "mhc_pre_apply_mix r4", "8192x4x7168", _pre_apply_mix(8192, 7168)),
    Case("mhc_pre_apply_mix", "mhc_pre_apply_mix r4", "128x4x4096", _pre_apply_mix(128, 4096)),
    Case(
        "mhc_pre_apply_mix_backward",
        "mhc_pre_apply_mix_backward r4",
        "8192x4x7168",
        _pre_apply_mix(8192, 7168, True),
        bench="mhc_pre_apply_mix",
        note="through autograd",
    ),
    Case(
        "mhc_pre_apply_mix_backward",
        "mhc_pre_apply_mix_backward r4",
        "128x4x4096",
        _pre_apply_mix(128, 4096, True),
        bench="mhc_pre_apply_mix",
        note="through autograd",
    ),
    Case("mhc_post", "mhc_post r4", "8192x4x7168", _mhc_post(8192, 7168)),
    Case("mhc_post", "mhc_post r4", "128x4x4096", _mhc_post(128, 4096)),
    Case(
        "mhc_post_backward",
        "mhc_post_backward r4",
        "8192x4x7168",
        _mhc_post(8192, 7168, True),
        bench="mhc_post",
        note="mhc_post_bwd",
    ),
    Case(
        "mhc_post_backward",
        "mhc_post_backward r4",
        "128x4x4096",
        _mhc_post(128, 4096, True),
        bench="mhc_post",
        note="mhc_post_bwd",
    ),
    Case(
        "engram_gate",
        "engram_gate bf16 shared v, weights [G, H]",
        "32768x4x7168",
        _engram_gate(32768, 4, 7168),
        note="engram_gate_fwd, save_for_backward",
    ),
    Case(
        "engram_gate_backward",
        "engram_gate_backward bf16",
        "8192x4x7168",
        _engram_gate_backward(8192, 4, 7168),
        bench="engram_gate",
        note=ENGRAM_BWD,
    ),
    Case(
        "engram_gate_backward",
        "engram_gate_backward bf16",
        "128x4x4096",
        _engram_gate_backward(128, 4, 4096),
        bench="engram_gate",
        note=ENGRAM_BWD,
    ),
    # Ops landing on other branches: no bench/ops file here yet, so no label to pair with.
    Case(
        "grad_w_reduce",
        None,
        "8192x4x7168",
        _grad_w_reduce(8192, 4, 7168),
        note="reduces engram_gate_bwd's partials",
    ),
    Case("fused_weight", None, "4x7168", _fused_weight(4, 7168)),
    Case("engram_hash", None, "32768x3, 2 layers x 16 tables", _engram_hash(32768)),
    Case("mhc_pre_split_mixes", None, "4x8192x24", _pre_split_mixes(4, 8192)),
    Case("mhc_head_compute_mix", None, "4x8192x4", _head_compute_mix(4, 8192)),
    Case("mhc_pre_norm_fn", None, "1x8192x4x7168", _pre_norm_fn(1, 8192, 7168)),
]


def catalog_ops(readme: str | None = None) -> set[str]:
    """The tileaot ops of README's "TileKernels counterparts" section: every backticked name in
    the first column of its tables that names an op: `op` and `(+ `op_backward`, autograd)`."""
    text = README.read_text() if readme is None else readme
    section = text.split("### TileKernels counterparts", 1)[1].split("\n#", 1)[0]
    ops = set()
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) > 2:  # the cell's first name and those after "+ " (options are not ops)
            ops |= set(re.findall(r"(?:^|\+ )`([a-z0-9_]+)`", cells[1].strip()))
    return ops


# ---- running ---------------------------------------------------------------------------------


def _patch_swiglu(tk) -> None:
    """TILEKERNELS-H200.md's second fix: the SwiGLU + cast kernel allocates its clamp-count
    reducers (`T.alloc_reducer`) unconditionally but finalises them only under `count_clamp`,
    which TileLang 0.1.15 rejects; the module is reloaded from a copy of its source with the
    allocation under `if count_clamp:` too (the timed path, without counting, is unchanged).
    Loaded from a file, not a string: TileLang reads the kernel's source back."""
    spec = importlib.util.find_spec(SWIGLU_MODULE)
    source = Path(spec.origin).read_text()
    block = re.search(
        r"\n( +)count_silu = T\.alloc_reducer.*?T\.fill\(count_lower, 0\)\n", source, re.S
    )
    if block is None or "if count_clamp:\n" + block.group(1) + "    count_silu" in source:
        return  # a release where this is fixed (or different): leave it as it is
    indent = block.group(1)
    body = "".join(f"    {line}\n" if line else "\n" for line in block.group(0)[1:-1].split("\n"))
    patched = source.replace(block.group(0), f"\n{indent}if count_clamp:\n{body}", 1)
    folder = Path(tempfile.mkdtemp(prefix="tkbench-"))
    path = folder / Path(spec.origin).name
    path.write_text(patched)
    module_spec = importlib.util.spec_from_file_location(SWIGLU_MODULE, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[SWIGLU_MODULE] = module
    module_spec.loader.exec_module(module)
    tk.quant.swiglu_forward_and_per_token_cast = module.swiglu_forward_and_per_token_cast


class TileKernels:
    """tile_kernels' subpackages under short names, with both compatibility fixes applied."""

    def __init__(self):
        tilelang = importlib.import_module("tilelang")
        # TILEKERNELS-H200.md's first fix: 0.1.15 moved tilelang.utils.target.
        sys.modules.setdefault("tilelang.utils.target", tilelang.backend.target)
        started = time.perf_counter()
        importlib.import_module("tile_kernels")
        self.import_s = time.perf_counter() - started
        self.quant = importlib.import_module("tile_kernels.quant")
        self.moe = importlib.import_module("tile_kernels.moe")
        self.transpose = importlib.import_module("tile_kernels.transpose")
        self.engram = importlib.import_module("tile_kernels.engram")
        self.mhc_ops = importlib.import_module("tile_kernels.modeling.mhc.ops")
        _patch_swiglu(self)


def unavailable_here() -> str | None:
    """Why nothing can be timed on this machine, or None."""
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    for name in ("tilelang", "tile_kernels"):
        if importlib.util.find_spec(name) is None:
            return (
                f"{name} is not importable (on the GPU machine: bash scripts/gpu_check.sh tkbench)"
            )
    return None


def run_case(case: Case, tk) -> dict:
    """Times one case; its row (status ok, unavailable or failed)."""
    row = {"op": case.op, "label": case.label, "size": case.size, "note": case.note}
    try:
        torch.manual_seed(0)
        fn = case.make(tk)
        torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        row["first_call_s"] = time.perf_counter() - started
        t = measure(fn)
    except Unavailable as exc:
        return row | {"status": "unavailable", "reason": str(exc)}
    except Exception as exc:  # one broken case must not hide the others
        return row | {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:300]}
    return row | {"status": "ok", "tk_us": t.median_us, "reps": t.reps}


def attach_tileaot(rows: list[dict], suite: dict | None) -> None:
    """Adds our median (and the ratio) from the suite's JSON to the rows of the same case."""
    ours = {(k["op"], k["size"]): k.get("tileaot_us") for k in (suite or {}).get("kernels", [])}
    for row in rows:
        case = next(
            c for c in CASES if (c.op, c.label, c.size) == (row["op"], row["label"], row["size"])
        )
        us = ours.get((row["label"], row["size"]))
        if us is not None:
            row["tileaot_us"] = us
            if row.get("tk_us"):
                row["ratio"] = row["tk_us"] / us
        elif not case.bench_file.exists():
            row["tileaot_note"] = f"no {case.bench_file.relative_to(ROOT)} in this tree yet"
        elif suite is not None:
            row["tileaot_note"] = "not in the suite's JSON"


def _us(value) -> str:
    return "—" if value is None else f"{value:.1f}"


def render(result: dict) -> str:
    """The Markdown table of a result (bench/tilekernels.py's JSON)."""
    m = result["machine"]
    lines = [
        f"# TileKernels beside tileaot: {m.get('gpu')}, {result['date']}",
        "",
        f"`{result['command']}`; torch {m.get('torch')}, tilelang {m.get('tilelang')}, "
        f"tile-kernels {m.get('tile_kernels')}; `import tile_kernels` {result['import_s']:.1f} s.",
        "TileKernels µs: its public function on inputs of our bench case's shape, timed by "
        "bench/timing.py (median of CUDA-event times, L2 flushed before each repetition); "
        "first call: synchronised, JIT compile included when its cache was empty. "
        "Ratio = TileKernels / tileaot (> 1: tileaot faster); tileaot µs from "
        f"{result.get('suite') or 'no suite JSON (--suite)'}.",
        "",
        "| op | case | shape | tileaot µs | TileKernels µs | ratio | first call s | note |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        ratio = f"{r['ratio']:.2f}×" if r.get("ratio") else "—"
        first = f"{r['first_call_s']:.2f}" if r.get("first_call_s") is not None else "—"
        tk_us = _us(r.get("tk_us")) if r["status"] == "ok" else r["status"]
        note = "; ".join(x for x in (r.get("reason"), r.get("note"), r.get("tileaot_note")) if x)
        lines.append(
            f"| {r['op']} | {r['label'] or '—'} | {r['size']} | {_us(r.get('tileaot_us'))} "
            f"| {tk_us} | {ratio} | {first} | {note.replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def write(result: dict, out_dir: Path) -> Path:
    """<gpu>-<date>-tilekernels.json and .md; returns the JSON's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{gpu_slug(result['machine'].get('gpu'))}-{result['date']}-tilekernels"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    stem.with_suffix(".md").write_text(render(result))
    return stem.with_suffix(".json")


def _report(row: dict) -> None:
    us = _us(row.get("tk_us")) if row["status"] == "ok" else row["status"]
    line = f"[tkbench] {row['op']:28s} {row['size']:18s} {us:>10s} {row.get('reason', '')}"
    print(line.rstrip(), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", help="bench/suite.py's JSON: our figures for the same cases")
    parser.add_argument("--out", default=str(BENCH / "results"), help="where the tables go")
    parser.add_argument("--match", default=".", help="only ops (or case labels) matching this")
    parser.add_argument("--cache", help="TileLang cache (default: empty, so first calls compile)")
    parser.add_argument("--json", help="also write the result here (a suite-style step)")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    why = unavailable_here()
    if why:
        print(f"[tkbench] skipped: {why}")
        return 0
    suite = json.loads(Path(args.suite).read_text()) if args.suite else None
    # Read by tilelang when it is imported: an empty folder makes every first call a cold JIT.
    os.environ["TILELANG_CACHE_DIR"] = args.cache or tempfile.mkdtemp(prefix="tkbench-tl-")
    try:
        tk = TileKernels()
    except ImportError as exc:
        print(f"[tkbench] skipped: tile_kernels does not import ({type(exc).__name__}: {exc})")
        return 0
    result = {
        "schema": 1,
        "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "command": " ".join(["python", "bench/tilekernels.py", *argv]),
        "suite": args.suite,
        "import_s": tk.import_s,
        "machine": {
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "tilelang": _version("tilelang"),
            "tile_kernels": _version("tile-kernels"),
        },
        "rows": [],
    }
    path = write(result, Path(args.out))
    for case in CASES:
        if re.search(args.match, case.op) or re.search(args.match, case.label or ""):
            result["rows"].append(run_case(case, tk))
            _report(result["rows"][-1])
            attach_tileaot(result["rows"], suite)
            path = write(result, Path(args.out))  # after every case: a timeout keeps the rest
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(f"[tkbench] wrote {path} and {path.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
