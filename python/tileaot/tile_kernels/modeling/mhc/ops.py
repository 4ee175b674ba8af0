"""TileKernels 1.0.0's ``tile_kernels.modeling.mhc.ops``, served by tileaot's mHC ops."""

from __future__ import annotations

import torch

import tileaot

__all__ = ["expand_to_mhc", "mhc_post", "mhc_pre_apply_mix", "sinkhorn_normalize"]
__all__ += ["mhc_pre_norm_fn", "mhc_pre_split_mixes", "mhc_head_compute_mix"]


def sinkhorn_normalize(x: torch.Tensor, repeat: int = 10, eps: float = 1e-6) -> torch.Tensor:
    """`tileaot.sinkhorn_normalize` of each ``[n, n]`` matrix of float32 `x` (differentiable);
    like TileKernels, a non-contiguous `x` is made contiguous first."""
    if isinstance(x, torch.Tensor):
        x = x.contiguous()
    return tileaot.sinkhorn_normalize(x, repeat, eps)


def expand_to_mhc(
    hidden: torch.Tensor, mhc_mult: int, out: torch.Tensor | None = None
) -> torch.Tensor:
    """`mhc_mult` copies of each bf16 row, ``[..., H] -> [..., mhc_mult, H]``:
    `tileaot.expand_to_mhc` (differentiable; `out` only outside autograd)."""
    return tileaot.expand_to_mhc(hidden, mhc_mult, out=out)


def mhc_pre_apply_mix(
    x: torch.Tensor, mix: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``sum_r mix[..., r, 0] * x[..., r, :]`` in float32, bf16 ``[..., H]``:
    `tileaot.mhc_pre_apply_mix` (differentiable in `x` and `mix`; `out` only outside
    autograd)."""
    return tileaot.mhc_pre_apply_mix(x, mix, out=out)


def mhc_post(
    x: torch.Tensor,
    residual: torch.Tensor,
    post_layer_mix: torch.Tensor,
    comb_res_mix: torch.Tensor,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The new residual streams ``post_layer_mix * x + comb_res_mix^T @ residual``, bf16
    ``[..., R, H]``: `tileaot.mhc_post` (differentiable in all four; `out` only outside
    autograd)."""
    return tileaot.mhc_post(x, residual, post_layer_mix, comb_res_mix, out=out)


def mhc_pre_norm_fn(
    residual: torch.Tensor,
    mhc_fn: torch.Tensor,
    mhc_norm_weight: torch.Tensor | None,
    mhc_norm_eps: float,
    fuse_grad_acc: bool = True,
    n_splits: int = 16,
) -> torch.Tensor:
    """The RMS-normalised mixes ``(x . fn[n]) * rsqrt(mean(x**2) + eps)`` of each token's
    flattened streams, float32 ``[..., N]``: `tileaot.mhc_pre_norm_fn` (differentiable in
    `residual`, `mhc_fn` and `mhc_norm_weight`; the backward is
    `tileaot.mhc_pre_norm_fn_backward`). `fuse_grad_acc` makes TileKernels' backward add
    `residual`'s gradient into the one its mhc_post backward left on the storage; here
    autograd adds the two gradients (the same sum), so it changes nothing, and neither does
    `n_splits` (TileKernels' kernel runs one split)."""
    return tileaot.mhc_pre_norm_fn(residual, mhc_fn, mhc_norm_weight, mhc_norm_eps)


def mhc_pre_split_mixes(
    input_mixes: torch.Tensor,
    mhc_scale: torch.Tensor,
    mhc_base: torch.Tensor,
    mhc_mult: int,
    mhc_post_mult_value: float,
    mhc_pre_eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The pre, post and combination mixes of float32 ``[..., R * (R + 2)]`` raw mixes:
    `tileaot.mhc_pre_split_mixes` (differentiable in the three tensors)."""
    return tileaot.mhc_pre_split_mixes(
        input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps
    )


def mhc_head_compute_mix(
    input_mix: torch.Tensor,
    mhc_scale: torch.Tensor,
    mhc_base: torch.Tensor,
    mhc_pre_eps: float,
) -> torch.Tensor:
    """``sigmoid(input_mix * mhc_scale[0] + mhc_base) + mhc_pre_eps``, float32 ``[..., R]``:
    `tileaot.mhc_head_compute_mix` (differentiable in the three tensors)."""
    return tileaot.mhc_head_compute_mix(input_mix, mhc_scale, mhc_base, mhc_pre_eps)
