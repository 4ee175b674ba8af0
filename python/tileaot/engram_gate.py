"""Engram gate: a gated residual ``h + g * v`` with one gate per row (op "engram_gate").

TileKernels' semantics (`tile-kernels` 1.0.0, `tile_kernels.modeling.engram.engram_gate`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _lib, _validate
from ._engram_args import _INF, _INPUTS, check_shapes
from ._engram_gate_save import forward_saved as _forward_saved
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "engram_gate"
# The kernel's view: rows of h, k [M, H]; v [MV, H] (MV = M, or one row per token when shared);
# weights [GW, H] (GW = G per branch, 1 for shared (H,) weights). The schema checks dtypes,
# device and layout; how v's and the weights' shapes relate to h's is check_shapes' to say.
SCHEMA = OpSchema(
    _OP,
    "h[*M, H]: T, k[*M, H]: T, v[*MV, H]: T, w_h[*GW, H]: T, w_k[*GW, H]: T"
    " -> out[*M, H]: T, g[*M]: fp32; eps: float32, clamp: float32",
    dtypes={"T": ("bf16", "fp32")},
    example={"M": 4 * 4096, "H": 7168, "MV": 4 * 4096, "GW": 4},  # h [4096, 4, 7168]
)
_WRITES = SCHEMA.writes  # the short path's output bits (out, g)
_DTYPES = SCHEMA.dtypes["T"]


def engram_gate(
    h: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w_h: torch.Tensor,
    w_k: torch.Tensor,
    eps: float = 1e-6,
    clamp_value: float = 1e-6,
    *,
    return_gate: bool = False,
    save_for_backward: bool = False,
    out: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """DeepSeek Engram's gated residual: ``out = h + g * v`` with one scalar gate per row.

    TileKernels' engram gate (``tile_kernels.modeling.engram.engram_gate``, reference
    ``tile_kernels.torch.engram.engram_gate_ref``): per-branch RMSNorm weights and a clamp.
    Rows are the last dimension (``H``); for each row, with its weight rows ``w_h``, ``w_k``
    (the row's branch's, or the shared ones), in float32::

        a   = h / sqrt(mean(h**2) + eps) * w_h          # RMSNorm of h
        b   = k / sqrt(mean(k**2) + eps) * w_k          # RMSNorm of k
        s   = sum(a * b) / sqrt(H)
        g   = sigmoid(sign(s) * sqrt(max(|s|, clamp_value)))
        out = h + g * v                                  # stored in h's dtype

    evaluated in TileKernels' order (``s = sum(h * (w_h * w_k) * k) * rstd_h * rstd_k /
    sqrt(H)``; ``g * v`` rounded before the add, as its reference does), so that bf16 outputs
    stay within TileKernels' test bound (``calc_diff < 2e-10``) of its reference.

    Differentiable: when autograd is on and an input requires grad, the call is recorded (the
    forward saving the statistics, as TileKernels' ``EngramGateFn``) and its backward runs
    :func:`tileaot.engram_gate_backward` on them (first-order gradients only; the weight
    gradients are float32, as TileKernels returns them, and autograd casts them to the
    weights' dtype).

    Args:
        h: CUDA tensor ``(..., H)`` (e.g. ``[T, H]``, or ``[T, G, H]`` with G hyper-connection
            branches: every leading dim is a row dim), dtype ``torch.bfloat16`` or
            ``torch.float32``; contiguous, with a 16-byte-aligned data pointer; ``H >= 1``.
        k: the key, same shape, dtype and device as `h`, contiguous, aligned.
        v: the value, same dtype and device as `h`, contiguous, aligned; either h's shape or
            h's shape with the second-to-last dim 1 (``[T, 1, H]`` for ``[T, G, H]`` h): one
            value row shared by the G rows of a token, as Engram with hyper-connections uses
            it (a key per branch, one value per token). It broadcasts as in torch.
        w_h: RMSNorm weight of `h`: ``h.shape[-2:]`` (``[G, H]``: one weight row per branch,
            TileKernels' ``weight_hidden``) or ``(H,)`` (one row shared by every row); same
            dtype and device as `h`, contiguous, aligned.
        w_k: RMSNorm weight of `k` (TileKernels' ``weight_embed``), the shape of `w_h`, same
            dtype and device, contiguous, aligned.
        eps: added to each mean square before the square root; a finite float >= 0.
        clamp_value: ``|s|`` is raised to at least this before the square root (TileKernels'
            ``clamp_value``; its kernels' default 1e-6); below it the gate is constant and its
            gradient 0. A finite float >= 0.
        return_gate: also return the gate ``g`` (float32, shape ``h.shape[:-1]``). It is not
            differentiable (no gradient flows back through it).
        save_for_backward: return TileKernels' saved statistics too, as its forward with
            ``save_for_backward=True`` (and ``engram_gate_ref(..., save_for_backward=True)``)
            does: ``(out, dot, g, rstd_h, rstd_k)``, each statistic float32 of shape
            ``h.shape[:-1]``: the raw ``dot = sum(h * w_h * k * w_k)``, the gate, and
            ``rstd_h = 1 / sqrt(mean(h**2) + eps)``, ``rstd_k`` likewise (what
            :func:`tileaot.engram_gate_backward` takes as ``saved``). Overrides
            `return_gate`; the statistics are not differentiable. A kernel of its own (op
            ``engram_gate_save``): the default call writes none of them.
        out: optional tensor to write `out` into instead of allocating: same shape, dtype and
            device as `h`, contiguous, aligned, not overlapping an input. With
            ``return_gate=True`` it may also be an ``(out, g)`` pair, `g` float32 of shape
            ``h.shape[:-1]`` (e.g. preallocated for CUDA graphs). Not allowed when the call is
            recorded by autograd. With ``save_for_backward=True`` it is the 5-tuple
            ``(out, dot, g, rstd_h, rstd_k)``.

    Returns:
        `out`, shaped and typed like `h` (the given tensor if `out` is given); with
        ``return_gate=True`` the pair ``(out, g)``; with ``save_for_backward=True`` the
        5-tuple above. If `h` has no rows nothing is launched.

    Raises:
        TypeError: an input or `out` is not a tensor (or, with ``return_gate=True``, an
            ``(out, g)`` pair), has an unsupported dtype, or the dtypes differ; `eps` or
            `clamp_value` is not a real number.
        ValueError: `h` is 0-d or ``H == 0``; `k` differs from `h` in shape, `v` has neither
            h's shape nor the shared one; `w_h`/`w_k` are neither ``(H,)`` nor
            ``h.shape[-2:]``, or differ in shape; a tensor is not on a CUDA device, not on
            the device of `h`, not contiguous or not 16-byte aligned; a dimension or element
            count reaches 2**31; `out` has the wrong shape or overlaps an input; `eps` or
            `clamp_value` < 0 or not finite.
        RuntimeError: `out` is given while autograd records the call.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype, shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    One kernel, enqueued on torch's current stream of `h`'s device; the call returns without
    synchronising. It reads h, k and v once and writes `out` once (plus 4 bytes of gate per
    row; a shared v row is read from memory once per token); ``H`` in {2048, 4096, 7168}
    has register-resident fast variants, any other ``H``
    works through a generic one.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> T, G, H = 16, 4, 7168
        >>> h, k, v = (torch.randn(T, G, H, dtype=torch.bfloat16, device="cuda")
        ...            for _ in range(3))
        >>> w_h = torch.ones(G, H, dtype=torch.bfloat16, device="cuda")  # one row per branch
        >>> w_k = torch.ones(G, H, dtype=torch.bfloat16, device="cuda")
        >>> out, g = tileaot.engram_gate(h, k, v, w_h, w_k, return_gate=True)  # g: [16, 4]
    """
    if (
        type(h) is _arrays.Tensor
        and type(k) is _arrays.Tensor
        and type(v) is _arrays.Tensor
        and isinstance(w_h, _arrays.Tensor)  # nn.Parameters too
        and isinstance(w_k, _arrays.Tensor)
        and type(eps) is float
        and 0.0 <= eps < _INF
        and type(clamp_value) is float
        and 0.0 <= clamp_value < _INF
        and h.dim() == 2 == k.dim()
        and v.shape == h.shape  # `_C.call` can't tell a shared v ([MV, H] in the kernel) from it
        and w_h.dim() == 1 == w_k.dim()
        and not save_for_backward
        and not _needs_autograd(h, k, v, w_h, w_k)  # recorded calls: the checked path
    ):
        pair = _fast(h, k, v, w_h, w_k, eps, clamp_value, out, return_gate)
        if pair is not None:
            return pair if return_gate else pair[0]
    elif type(h) is not _arrays.Tensor and _arrays.foreign(h):
        return _arrays.call(engram_gate, locals())
    key = _validate.dtype_key("h", h, _DTYPES)
    for name, t in zip(_INPUTS[1:], (k, v, w_h, w_k), strict=True):
        _validate.same_dtype(name, t, "h", h)
    if _needs_autograd(h, k, v, w_h, w_k):
        if out is not None:
            raise RuntimeError(
                "engram_gate: out= is not supported when an input requires grad (autograd "
                "cannot record a call that writes into a given tensor); drop out= or call it "
                "under torch.no_grad()"
            )
        result, *stats = _autograd_function().apply(h, k, v, w_h, w_k, eps, clamp_value)
        if save_for_backward:
            return (result, *stats)
        gate = stats[1]
    elif save_for_backward:
        return _forward_saved(key, h, k, v, w_h, w_k, eps, clamp_value, out)
    else:
        result, gate = _forward(key, h, k, v, w_h, w_k, eps, clamp_value, out, return_gate)
    return (result, gate) if return_gate else result


def _fast(h, k, v, w_h, w_k, eps, clamp, out, return_gate):
    """The short path for plain 2-D torch tensors outside autograd: ``(out, gate)``, or None
    if `_lib.fast` declined (the checked path then runs). `out` as `_forward` takes it."""
    if out is None or type(out) is _arrays.Tensor:
        y = h.new_empty(h.shape) if out is None else out
        gate = h.new_empty(h.shape[0], dtype=_arrays._torch.float32)
    elif return_gate and _arrays.plain_pair(out, 2):
        y, gate = out
    else:
        return None
    w2 = (w_h[None], w_k[None])  # the kernel's weights are [GW, H]: (H,) is one shared row
    if _lib.fast((_OP, h.dtype), (h, k, v, *w2, y, gate), (eps, clamp), _WRITES):
        return y, gate
    return None


def _needs_autograd(*tensors: Any) -> bool:
    fw = _arrays.namespace(tensors[0])
    return fw.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _forward(key, h, k, v, w_h, w_k, eps, clamp, out, return_gate=False):
    """Validate, allocate, launch: ``(out, gate)``. `key` is h's dtype key (checked before)."""
    *_, eps, clamp = check_shapes(h, k, v, w_h, w_k, eps, clamp)  # the engram-specific rules
    inputs = {"h": h, "k": k, "v": v, "w_h": w_h, "w_k": w_k}
    bound = SCHEMA.bind(inputs)
    fw = _arrays.namespace(h)
    if out is None or (return_gate and isinstance(out, (tuple, list))):
        y, gate = SCHEMA.outputs(fw, h, bound, out, inputs)
    else:  # out= the output alone: the gate is allocated
        _validate.check_out("out", out, h.dtype, h.shape, bound.device)
        _validate.check_no_overlap(("out",), (out,), _INPUTS, (h, k, v, w_h, w_k))
        y, gate = out, h.new_empty(h.shape[:-1], dtype=fw.float32)
    if h.numel() == 0:
        return y, gate
    dims = bound.dims
    handle = SCHEMA.launch(key, bound.device, (h, k, v, w_h, w_k, y, gate), (eps, clamp), dims)
    # As `_fast` launches: 2-D h, v of h's shape, (H,) weights (passed as [1, H]).
    if type(h) is _arrays.Tensor and h.dim() == 2 and dims["MV"] == dims["M"] and w_h.dim() == 1:
        _lib.learn((_OP, h.dtype), handle)
    return y, gate


_FUNCTION = None


def _autograd_function():
    """The torch.autograd.Function, defined on first use (importing tileaot imports no torch)."""
    global _FUNCTION
    if _FUNCTION is None:
        import torch
        from torch.autograd.function import once_differentiable

        from .engram_gate_backward import engram_gate_backward

        class EngramGateFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, h, k, v, w_h, w_k, eps, clamp):
                # TileKernels' EngramGateFn: the forward saves the row statistics and the
                # backward consumes them (a recomputation would sum in another order).
                key = _validate.dtype_key("h", h, _DTYPES)
                out, *stats = _forward_saved(key, h, k, v, w_h, w_k, eps, clamp, None)
                ctx.save_for_backward(h, k, v, w_h, w_k, *stats)
                ctx.clamp = clamp
                ctx.mark_non_differentiable(*stats)
                return (out, *stats)

            @staticmethod
            @once_differentiable
            def backward(ctx, grad_out, *grad_stats):
                h, k, v, w_h, w_k, *stats = ctx.saved_tensors
                grads = engram_gate_backward(
                    _validate.dense(grad_out),
                    h,
                    k,
                    v,
                    w_h,
                    w_k,
                    saved=stats,
                    clamp_value=ctx.clamp,
                )
                need = ctx.needs_input_grad
                return (*(g if need[i] else None for i, g in enumerate(grads)), None, None)

        _FUNCTION = EngramGateFunction
    return _FUNCTION


example_shapes = SCHEMA.example_shapes
