"""Gradients of the Engram gate (op "engram_gate_backward")."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from . import _arrays, _validate
from ._engram_args import check_shapes
from ._engram_gate_save import forward_saved
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "engram_gate_backward"
# The kernel's view, as engram_gate's (python/tileaot/engram_gate.py): rows of h [M, H], v
# [MV, H], weights [GW, H]; then the forward's saved statistics [M] (`saved`: dot, g, rstd_h,
# rstd_k; the kernel calls g `gate`), the gradients (the weights' shaped as the weights:
# ``(H,)`` or ``[G, H]``) and a scratch of B per-block weight-gradient sums. B (a multiple of
# GW, sized by the GPU's multiprocessors) is the wrapper's to give. What the schema cannot say:
# the kernel's grad_v is per row of h; for a shared v ([..., 1, H]) the public grad_v is the
# float32 sum of each token's rows, in torch (`_outputs`, then the end of the call).
SCHEMA = OpSchema(
    _OP,
    "grad_out[*M, H]: T, h[*M, H]: T, k[*M, H]: T, v[*MV, H]: T, w_h[*GW, H]: T,"
    " w_k[*GW, H]: T, dot[*M]: fp32, gate[*M]: fp32, rstd_h[*M]: fp32, rstd_k[*M]: fp32"
    " -> grad_h[*M, H]: T, grad_k[*M, H]: T, grad_v[*M, H]: T, grad_w_h[*GW, H]: fp32,"
    " grad_w_k[*GW, H]: fp32, scratch partial[B, H]: fp32; clamp: float32",
    dtypes={"T": ("bf16", "fp32")},
    example={"M": 4 * 4096, "H": 7168, "MV": 4 * 4096, "GW": 4},  # h [4096, 4, 7168]
)
_DTYPES = SCHEMA.dtypes["T"]
_SAVED = ("saved[0] (dot)", "saved[1] (g)", "saved[2] (rstd_h)", "saved[3] (rstd_k)")
_EXAMPLE_SMS = 132  # an H100/H200, for `info`'s example call

# Thread blocks per SM of each variant (kernels_py/engram/engram_gate_backward.py
# BLOCKS_PER_SM; a CPU test keeps the two equal). The kernel launches SMs * this many blocks
# (fewer for few rows), each summing its rows' weight gradients; any value is correct, the
# right one fills the GPU in one wave.
_BLOCKS_PER_SM = {
    ("bf16", 2048): 4,
    ("bf16", 4096): 2,
    ("bf16", 7168): 3,
    ("fp32", 2048): 4,
    ("fp32", 4096): 2,
    ("fp32", 7168): 2,
}
_GENERIC_BLOCKS_PER_SM = 4
_SM_COUNT: dict[int, int] = {}


def engram_gate_backward(
    grad_out: torch.Tensor,
    h: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w_h: torch.Tensor,
    w_k: torch.Tensor,
    eps: float = 1e-6,
    saved: tuple[torch.Tensor, ...] | None = None,
    *,
    clamp_value: float = 1e-6,
    out: tuple[torch.Tensor, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of :func:`tileaot.engram_gate` with respect to h, k, v, w_h and w_k.

    What TileKernels' backward (``tile_kernels.engram.engram_gate_bwd`` and ``grad_w_reduce``,
    as its ``EngramGateFn`` calls them) computes from the statistics its forward saved, i.e.
    autograd of its ``engram_gate_ref``. With the saved ``dot``, gate ``g``, ``rh = rstd_h``,
    ``rk = rstd_k`` of the row, ``s = dot * rh * rk / sqrt(H)``, ``w_h``, ``w_k`` the row's
    weight rows and ``go = grad_out`` (float32 math; sums over a row, ``P`` over the rows of
    each weight row)::

        c      = <go, v> * g * (1 - g) / (2 * sqrt(|s|)) / sqrt(H)   (0 if |s| < clamp_value)
        grad_v = g * go
        grad_h = go + c * rh * rk * k * w_h * w_k - c * rh**2 * s / sqrt(H) * h
        grad_k =      c * rh * rk * h * w_h * w_k - c * rk**2 * s / sqrt(H) * k
        P      = sum over rows of c * rh * rk * h * k
        grad_w_h = w_k * P,   grad_w_k = w_h * P

    Below `clamp_value` the gate is constant, so its rows pass no gradient through it (as
    TileKernels). With ``clamp_value < 1e-6`` the slope ``1 / (2 sqrt(|s|))``, unbounded near
    ``s = 0``, is taken as ``1 / (2 sqrt(max(|s|, 1e-6)))`` (at most 500), so rows with tiny
    ``s`` get finite gradients. The weight gradients are
    reduced deterministically: per-block float32 partial sums, then a fixed-order sum (no
    atomics); the same inputs give bitwise the same gradients on the same GPU model.

    Args:
        grad_out: gradient of the loss with respect to engram_gate's `out`: shape, dtype and
            device of `h`, contiguous, 16-byte aligned.
        h, k, v, w_h, w_k, eps: the forward's inputs, with the same requirements as in
            :func:`tileaot.engram_gate` (weights ``(H,)`` or per branch ``h.shape[-2:]``).
            `eps` is only used when `saved` is None.
        saved: ``(dot, g, rstd_h, rstd_k)``, the statistics the forward saved
            (``engram_gate(..., save_for_backward=True)[1:]``, or TileKernels'
            ``engram_gate_fwd`` / ``engram_gate_ref(..., save_for_backward=True)``): float32,
            shape ``h.shape[:-1]``, on h's device, contiguous, aligned. The kernel reads them
            instead of recomputing them, as TileKernels' backward does. None: they are
            computed first by ``engram_gate(..., save_for_backward=True)`` (one more launch).
        clamp_value: the forward's `clamp_value` (keyword only), a finite float >= 0.
        out: optional ``(grad_h, grad_k, grad_v, grad_w_h, grad_w_k)`` to write into, with
            exactly the shapes and dtypes below, on the device of `h`, contiguous, aligned,
            not overlapping the inputs or each other.

    Returns:
        ``(grad_h, grad_k, grad_v, grad_w_h, grad_w_k)``: grad_h and grad_k shaped like `h`,
        grad_v like `v`, all three in h's dtype, the last two like `w_h` in float32 (as
        TileKernels returns them; the tensors of `out` if given). With no rows, nothing is
        launched and the weight gradients are zeros. For a shared `v` (``[..., 1, H]``),
        grad_v is the float32 sum of its rows' ``g * go`` (computed in torch from the saved
        gate), rounded once.

    Raises:
        TypeError: an argument is not a tensor, has an unsupported dtype, or the dtypes differ;
            `saved` is not a 4-tuple of float32 tensors; `eps` or `clamp_value` is not a real
            number; `out` is not a 5-tuple.
        ValueError: as :func:`tileaot.engram_gate` for h, k, v, w_h, w_k; `grad_out` or a
            `saved` tensor has a wrong shape, device or layout; an `out` tensor has a wrong
            shape or overlaps.
        NotImplementedError: a shared `v` with arrays that are not torch tensors.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype, shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    Two kernels, enqueued in order on torch's current stream of `h`'s device (the call does not
    synchronise): the first reads grad_out, h, k, v and the saved statistics once and writes
    grad_h, grad_k, grad_v once, plus a ``[blocks, H]`` float32 scratch of per-block
    weight-gradient sums (a few blocks per SM); the second reduces the scratch. A shared `v`
    adds an h-shaped scratch for the rows' grad_v terms and a torch sum over each token's rows.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> h, k, v = (torch.randn(16, 4, 7168, dtype=torch.bfloat16, device="cuda")
        ...            for _ in range(3))
        >>> w_h, w_k = (torch.ones(4, 7168, dtype=torch.bfloat16, device="cuda") for _ in "hk")
        >>> go = torch.randn_like(h)
        >>> out, *saved = tileaot.engram_gate(h, k, v, w_h, w_k, save_for_backward=True)
        >>> grad_h, grad_k, grad_v, grad_w_h, grad_w_k = tileaot.engram_gate_backward(
        ...     go, h, k, v, w_h, w_k, saved=saved)
    """
    if type(grad_out) is not _arrays.Tensor and _arrays.foreign(grad_out):
        return _arrays.call(engram_gate_backward, locals())
    fw = _arrays.namespace(grad_out)
    key = _validate.dtype_key("h", h, _DTYPES)
    for name, t in (("grad_out", grad_out), ("k", k), ("v", v), ("w_h", w_h), ("w_k", w_k)):
        _validate.same_dtype(name, t, "h", h)
    rows, n, _, w_rows, eps, clamp = check_shapes(h, k, v, w_h, w_k, eps, clamp_value)
    shared = v.shape != h.shape  # v is [..., 1, H]: one row per token (check_shapes' rule)
    if shared and type(grad_out) is not _arrays.Tensor:
        raise NotImplementedError(
            "engram_gate_backward: a shared v (shape (..., 1, H)) needs torch tensors (grad_v "
            "is summed over each token's rows in torch); pass torch tensors, or a v of h's shape"
        )
    if grad_out.shape != h.shape:
        raise ValueError(
            f"grad_out must have the shape of h {tuple(h.shape)}; got {tuple(grad_out.shape)}"
        )
    given = saved is not None
    # Without `saved`, the forward computes the statistics after every check, into these.
    saved = _check_saved(saved, h) if given else _stats(fw, h)
    inputs = {"grad_out": grad_out, "h": h, "k": k, "v": v, "w_h": w_h, "w_k": w_k}
    inputs |= dict(zip(("dot", "gate", "rstd_h", "rstd_k"), saved, strict=True))
    # B: whole groups of one block per weight row (rows >= GW), a few per multiprocessor.
    blocks = 0
    if rows:
        device = _validate.device_index("h", h)
        per_sm = _BLOCKS_PER_SM.get((key, n), _GENERIC_BLOCKS_PER_SM)
        blocks = min(rows, _sm_count(device) * per_sm)
        blocks -= blocks % w_rows
    bound = SCHEMA.bind(inputs, B=blocks)
    grads, row_grad_v = _outputs(fw, h, v, bound, out, inputs, shared)
    if not given and rows:  # every argument checked: the forward's statistics first
        forward_saved(key, h, k, v, w_h, w_k, eps, clamp, (fw.empty_like(h), *saved))
    if rows == 0:
        for t in (*grads[3:], grads[2]) if shared else grads[3:]:
            t.zero_()  # a sum over no rows
        return grads
    tensors = (*inputs.values(), grads[0], grads[1], row_grad_v, grads[3], grads[4])
    workspace = SCHEMA.workspace(fw, h, bound.dims)
    SCHEMA.launch(key, bound.device, (*tensors, workspace), (clamp,), bound.dims)
    if shared:
        # float32 sums of each token's rows' g * go, rounded once, as TileKernels' backward
        # (one thread sums a token's branches) and autograd of its reference do; the kernel's
        # per-row terms are already rounded to h's dtype, so they are not summed.
        terms = grad_out.to(fw.float32) * saved[1].unsqueeze(-1)
        grads[2].copy_(terms.sum(-2, keepdim=True))
    return grads


def _stats(fw: Any, h: Any) -> tuple:
    """Room for the forward's four statistics (float32, ``h.shape[:-1]``)."""
    return tuple(h.new_empty(h.shape[:-1], dtype=fw.float32) for _ in range(4))


def _outputs(fw: Any, h: Any, v: Any, bound: Any, out: Any, inputs: dict, shared: bool):
    """``(grad_h, grad_k, grad_v, grad_w_h, grad_w_k)`` allocated or `out` checked by the
    schema, and the tensor the kernel writes each row's grad_v term into: grad_v itself, or
    for a shared v an h-shaped buffer, the public grad_v being v-shaped (the truly irregular
    part of the contract: the schema describes the kernel's [M, H] grad_v)."""
    if not shared:
        grads = SCHEMA.outputs(fw, h, bound, out, inputs)
        return grads, grads[2]
    if out is None:
        grads = SCHEMA.outputs(fw, h, bound, None, inputs)
        return (*grads[:2], fw.empty_like(v), *grads[3:]), grads[2]
    row_grad_v = fw.empty_like(h)
    if not isinstance(out, (tuple, list)) or len(out) != 5:
        SCHEMA.outputs(fw, h, bound, out, inputs)  # raises: not a 5-tuple of tensors
    names = ("out[0] (grad_h)", "out[1] (grad_k)", "out[2] (grad_v)")
    names += ("out[3] (grad_w_h)", "out[4] (grad_w_k)")
    _validate.check_out(names[2], out[2], h.dtype, v.shape, bound.device)
    SCHEMA.outputs(fw, h, bound, (*out[:2], row_grad_v, *out[3:]), inputs)
    _validate.check_no_overlap(names, tuple(out), tuple(inputs), tuple(inputs.values()))
    return tuple(out), row_grad_v


def _check_saved(saved: Any, h: Any) -> tuple:
    """`saved` as a tuple, checked: four float32 tensors of shape ``h.shape[:-1]`` on h's
    device, dense and aligned (the kernel reads them as [M])."""
    if not isinstance(saved, (tuple, list)) or len(saved) != 4:
        what = type(saved).__name__
        if isinstance(saved, (tuple, list)):
            what += f" of length {len(saved)}"
        raise TypeError(
            "saved must be the forward's (dot, g, rstd_h, rstd_k), e.g. "
            f"engram_gate(..., save_for_backward=True)[1:]; got {what}"
        )
    fw = _arrays.namespace(h)
    for name, t in zip(_SAVED, saved, strict=True):
        _validate.require_tensor(name, t)
        if t.dtype is not fw.float32:
            raise TypeError(
                f"{name} has dtype {t.dtype}; the forward saves it as float32 (pass "
                "engram_gate(..., save_for_backward=True)[1:])"
            )
        if t.shape != h.shape[:-1]:
            raise ValueError(
                f"{name} must have shape {tuple(h.shape[:-1])} (h's shape without H); got "
                f"{tuple(t.shape)}"
            )
    _validate.check_memory(("h", *_SAVED), (h, *saved))
    return tuple(saved)


def _sm_count(device: int) -> int:
    """Streaming multiprocessors of CUDA device `device` (read once per device)."""
    count = _SM_COUNT.get(device)
    if count is None:
        torch = sys.modules.get("torch")  # without torch (DLPack arrays), ask the driver
        if torch is None:
            from ._driver import sm_count

            count = _SM_COUNT[device] = sm_count(device)
        else:
            props = torch.cuda.get_device_properties(device)
            count = _SM_COUNT[device] = props.multi_processor_count
    return count


def example_shapes(key: str) -> tuple[str, tuple[int, ...]]:
    """A typical call for `python -m tileaot info`: its description and flat shapes (B as on
    an H100/H200)."""
    dims = {**SCHEMA.example, "B": _EXAMPLE_SMS * _BLOCKS_PER_SM[(key, SCHEMA.example["H"])]}
    return SCHEMA.describe(dims, key), SCHEMA.flat(dims, key)
