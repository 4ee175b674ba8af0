"""Shared by tests/test_torch_ops.py (CPU) and tests/test_gpu_torch_ops.py: a model block written
with ``torch.ops.tileaot.*``, and the public wrapper called as the torch op would call it."""

from __future__ import annotations

import importlib

import torch


def block(x, w, w_router, w_up, w_down):
    """A MoE-style block: norm, router, top-k, dispatch, expert MLP with an FP8 round trip,
    combine and residual: every kind of op the compile and CUDA-graph paths must carry."""
    y = torch.ops.tileaot.rms_norm(x, w)
    scores = torch.ops.tileaot.gemm(y, w_router).float()
    idx, weights = torch.ops.tileaot.topk_gate(scores, 2)
    xs, offsets, pos, _ = torch.ops.tileaot.moe_expand(y, idx, w_router.shape[0], 8)
    hidden = torch.ops.tileaot.swiglu(torch.ops.tileaot.gemm(xs, w_up))
    q, scale = torch.ops.tileaot.per_token_cast_fp8(hidden, None)
    ys = torch.ops.tileaot.gemm(torch.ops.tileaot.cast_back(q, scale), w_down)
    return x + torch.ops.tileaot.moe_reduce(ys, pos, weights), offsets


def wrapper_call(op: str, args: tuple, **out):
    """The public function `op` on the torch op's positional `args`, passed by the schema's
    names (some wrapper parameters are keyword-only), plus the op's fixed keywords."""
    specs = importlib.import_module("tileaot.torch_ops._specs").SPECS
    spec = next(s for s in specs if s.name == op)
    names = [a.name for a in getattr(torch.ops.tileaot, op).default._schema.arguments]
    return spec.fn(**dict(zip(names, args, strict=False)), **spec.fixed, **out)


def wrapper_block(x, w, w_router, w_up, w_down, buf):
    """`block` written with the public functions, as a model would call them (positional and
    keyword arguments, ``out=``, a NamedTuple result, ``return_gate``): under torch.compile
    each call must trace as its torch op."""
    import tileaot

    y = tileaot.rms_norm(x, w, out=buf)
    scores = tileaot.gemm(y, w_router).float()
    idx, weights = tileaot.topk_gate(scores, 2, scoring="sigmoid")
    res = tileaot.moe_expand(y, idx, w_router.shape[0], alignment=8)
    hidden = tileaot.swiglu(tileaot.gemm(res.x_sorted, w_up))
    q, scale = tileaot.per_token_cast_fp8(hidden, group_size=None)
    ys = tileaot.gemm(tileaot.cast_back(q, scale, out_dtype=torch.bfloat16), w_down)
    moe = tileaot.moe_reduce(ys, res.token_pos, weights)
    out, gate = tileaot.engram_gate(x, moe, moe, w, w, return_gate=True)
    return out, gate, res.expert_offsets
