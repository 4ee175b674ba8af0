"""What the compat functions share: the one-line error for an option tileaot does not serve,
and the scale-format conversions between TileKernels' float32 scales and our UE8M0 bytes."""

from __future__ import annotations

from typing import Any

import torch

_PREFIX = "tileaot.tile_kernels."
# float32 bits that must be zero in a power-of-two scale (sign and mantissa), so that the
# exponent byte alone holds it.
_NOT_POW2 = -0x7F800001  # 0x807FFFFF as an int32


def show(value: Any) -> str:
    """A short one-line repr (a tensor's repr would print its data over many lines)."""
    if isinstance(value, torch.Tensor):
        return f"<tensor {tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}>"
    if isinstance(value, tuple):
        return "(" + ", ".join(show(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def not_served(func: str, arg: str, value: Any, served: str, when: str = "") -> NotImplementedError:
    """The error for an argument value TileKernels takes and tileaot does not serve (yet);
    `when` names the other argument that makes it so (e.g. ``"fmt='e2m1'"``)."""
    cond = f" with {when}" if when else ""
    return NotImplementedError(
        f"{_PREFIX}{func}: {arg}={show(value)} is not served yet{cond} (served: {served})"
    )


def require(func: str, arg: str, value: Any, served: tuple, when: str = "") -> None:
    """Raise `not_served` unless `value` is one of `served`."""
    if not any(_same(value, s) for s in served):
        raise not_served(func, arg, value, ", ".join(show(s) for s in served), when)


def require_none(func: str, **options: Any) -> None:
    """Raise `not_served` for the first of `options` that is given (not None)."""
    for arg, value in options.items():
        if value is not None:
            raise not_served(func, arg, value, "None")


def _same(value: Any, served: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return False
    if isinstance(served, tuple):
        return isinstance(value, (tuple, list)) and tuple(value) == served
    # True == 1 in Python: a bool option is served only by a bool, an int one only by an int
    return isinstance(value, bool) == isinstance(served, bool) and value == served


def ue8m0_to_float(e: torch.Tensor) -> torch.Tensor:
    """UE8M0 exponent bytes as the float32 scales ``2**(e - 127)`` (0 -> 0.0, 255 -> +inf, as
    TileKernels decodes them); exact: the byte becomes the float's exponent field."""
    return (e.to(torch.int32) << 23).view(torch.float32)


def exponent_bytes(sf: torch.Tensor) -> torch.Tensor:
    """The exponent field of each float32 scale as uint8: what TileKernels packs as a UE8M0
    scale, also of a scale that is no power of two (no check, so no sync)."""
    return ((sf.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)


def float_to_ue8m0(func: str, sf: torch.Tensor) -> torch.Tensor:
    """Float32 power-of-two scales as UE8M0 exponent bytes (the inverse of `ue8m0_to_float`).

    A scale that is no power of two (or 0.0 / +inf) has no byte: ValueError. Checking it reads
    one flag back from the device (a sync)."""
    bits = sf.contiguous().view(torch.int32)
    if bool(((bits & _NOT_POW2) != 0).any()):
        raise ValueError(
            f"{_PREFIX}{func}: e2m1 scales must be powers of two (as per_token_cast(x, 'e2m1', g, "
            "round_sf=True) writes them); tileaot decodes FP4 only with UE8M0 scales"
        )
    return (bits >> 23).to(torch.uint8)


def row_weights(func: str, pos_to_token_topk: torch.Tensor, topk_weights: Any) -> torch.Tensor:
    """The float32 weight of each expanded row: its (token, slot)'s, 0 for position -1."""
    if not isinstance(topk_weights, torch.Tensor):
        raise ValueError(f"tileaot.tile_kernels.{func}: pos_to_token_topk needs topk_weights")
    flat = topk_weights.reshape(-1).float()
    pos = pos_to_token_topk.long()
    if flat.numel() == 0:
        return torch.zeros(pos.shape, dtype=torch.float32, device=pos.device)
    return torch.where(pos >= 0, flat[pos.clamp(min=0)], 0.0)
