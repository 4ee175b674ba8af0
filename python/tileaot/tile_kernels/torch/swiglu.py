"""TileKernels 1.0.0's ``tile_kernels.torch.swiglu``, served by `tileaot.swiglu` (forward) and
`tileaot.swiglu_backward`, with TileKernels' results: float32 outputs, bit-exact on CUDA."""

from __future__ import annotations

import torch

import tileaot

from .._served import require, row_weights

QuantTensor = tuple[torch.Tensor, torch.Tensor]

__all__ = ["swiglu_backward", "swiglu_forward"]


def swiglu_forward(
    x: torch.Tensor,
    pos_to_token_topk: torch.Tensor | None = None,
    topk_weights: torch.Tensor | None = None,
    swiglu_clamp_value: float | None = None,
    clamped_count: torch.Tensor | None = None,
) -> torch.Tensor:
    """``silu(x[:, :H]) * x[:, H:]`` in float32 (x bf16 or float32 ``[M, 2H]``), the gate
    clamped to ``(-inf, c]`` and the up half to ``[-c, c]`` first when ``swiglu_clamp_value=c``
    (``clamped_count[0:3] +=`` the numbers of gates above c, up values above c and below -c),
    then each row times ``topk_weights.view(-1)[pos_to_token_topk[i]]`` (0 for -1; only with
    ``pos_to_token_topk``). Returns float32 ``[M, H]``.

    `tileaot.swiglu` on a float32 copy of x (clamped by torch when asked): the kernel's fp32
    path is torch's formula bit for bit; the row weight is one torch multiply after it, as in
    TileKernels' reference, and the counts are torch sums."""
    xf = x.float() if x.dtype != torch.float32 or swiglu_clamp_value is not None else x
    if swiglu_clamp_value is not None:
        c = swiglu_clamp_value
        h = xf.shape[-1] // 2
        gate, up = xf[..., :h], xf[..., h:]
        if clamped_count is not None:
            clamped_count[0] += (gate > c).sum()
            clamped_count[1] += (up > c).sum()
            clamped_count[2] += (up < -c).sum()
        xf = torch.cat([gate.clamp(max=c), up.clamp(min=-c, max=c)], dim=-1)
    out = tileaot.swiglu(xf)
    if pos_to_token_topk is not None:  # TileKernels ignores topk_weights without it
        out = out * row_weights("swiglu_forward", pos_to_token_topk, topk_weights)[:, None]
    return out


def swiglu_backward(
    x: QuantTensor,
    grad_out: torch.Tensor,
    weight: torch.Tensor,
    pos_to_token_topk: torch.Tensor,
    token_topk_to_pos: torch.Tensor,
    num_per_channels: int,
    swiglu_clamp_value: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(out, x_grad, weight_grad)`` of the weighted SwiGLU from its e4m3 input ``x = (data
    [M, 2H] or [B, S, 2H], sf [M, 2H / num_per_channels])``, `tileaot.swiglu_backward` (float32
    out and x_grad, bit-exact; weight_grad a float32 sum within TileKernels' 1e-4 bound).
    ``num_per_channels`` 32 or 128; bf16 `grad_out` (the dtype TileKernels' fused kernel
    takes)."""
    args = (x, grad_out, weight, pos_to_token_topk, token_topk_to_pos, num_per_channels)
    return backward("swiglu_backward", *args, swiglu_clamp_value)


def backward(
    func: str,
    x: QuantTensor,
    grad_out: torch.Tensor,
    weight: torch.Tensor,
    pos_to_token_topk: torch.Tensor,
    token_topk_to_pos: torch.Tensor,
    num_per_channels: int,
    swiglu_clamp_value: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`tileaot.swiglu_backward` (float32) on TileKernels' backward arguments, checked, errors
    naming `func`."""
    data, sf, grad_out = _backward_inputs(func, x, grad_out, num_per_channels)
    return tileaot.swiglu_backward(
        data, sf, grad_out, weight, pos_to_token_topk, token_topk_to_pos, swiglu_clamp_value
    )


def _backward_inputs(
    func: str, x: QuantTensor, grad_out: torch.Tensor, num_per_channels: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(data [M, 2H], sf, grad_out [M, H]) of TileKernels' backward arguments, checked."""
    require(func, "num_per_channels", num_per_channels, (32, 128))
    if not (isinstance(x, (tuple, list)) and len(x) == 2):
        raise TypeError(
            f"tileaot.tile_kernels.{func}: x must be a (data, sf) pair, not {type(x).__name__}"
        )
    data, sf = x
    if isinstance(data, torch.Tensor):
        require(func, "x[0].dtype", data.dtype, (torch.float8_e4m3fn,))
    if isinstance(grad_out, torch.Tensor):
        require(func, "grad_out.dtype", grad_out.dtype, (torch.bfloat16,))
    if isinstance(data, torch.Tensor) and isinstance(sf, torch.Tensor) and data.dim() in (2, 3):
        cols = data.shape[-1]
        if sf.dim() == 2 and sf.shape[-1] * num_per_channels != cols:
            raise ValueError(
                f"tileaot.tile_kernels.{func}: x's scales have {sf.shape[-1]} columns, not "
                f"2H / num_per_channels = {cols} / {num_per_channels}"
            )
        data = data.reshape(-1, cols)
        if isinstance(grad_out, torch.Tensor):
            grad_out = grad_out.reshape(-1, cols // 2)
    return data, sf, grad_out
