"""Engram gate: a gated residual ``h + g * v`` with one gate per row (op "engram_gate")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _lib, _validate
from ._engram_args import _INF, _INPUTS, check_inputs

if TYPE_CHECKING:
    import torch

_OP = "engram_gate"
_DTYPES = ("bf16", "fp32")
_WRITES_OUT_GATE = 0b1100000  # `_lib.fast`: tensors (h, k, v, w_h, w_k, out, gate)


def engram_gate(
    h: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w_h: torch.Tensor,
    w_k: torch.Tensor,
    eps: float = 1e-6,
    *,
    return_gate: bool = False,
    out: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek Engram's gated residual: ``out = h + g * v`` with one scalar gate per row.

    Rows are the last dimension (``H``); for each row, in float32::

        a   = h / sqrt(mean(h**2) + eps) * w_h          # RMSNorm of h
        b   = k / sqrt(mean(k**2) + eps) * w_k          # RMSNorm of k
        s   = sum(a * b) / sqrt(H)
        g   = sigmoid(sign(s) * sqrt(|s|))
        out = h + g * v                                  # stored in h's dtype

    Differentiable: when autograd is on and an input requires grad, the call is recorded and
    its backward runs :func:`tileaot.engram_gate_backward` (first-order gradients only).

    Args:
        h: CUDA tensor ``(..., H)`` (e.g. ``[T, H]``, or ``[T, G, H]`` with G hyper-connection
            branches: every leading dim is a row dim), dtype ``torch.bfloat16`` or
            ``torch.float32``; contiguous, with a 16-byte-aligned data pointer; ``H >= 1``.
        k: the key, same shape, dtype and device as `h`, contiguous, aligned.
        v: the value, same dtype and device as `h`, contiguous, aligned; either h's shape or
            h's shape with the second-to-last dim 1 (``[T, 1, H]`` for ``[T, G, H]`` h): one
            value row shared by the G rows of a token, as Engram with hyper-connections uses
            it (a key per branch, one value per token). It broadcasts as in torch.
        w_h: RMSNorm weight of `h`, shape ``(H,)``, same dtype and device, contiguous, aligned.
        w_k: RMSNorm weight of `k`, shape ``(H,)``, same dtype and device, contiguous, aligned.
        eps: added to each mean square before the square root; a finite float >= 0.
        return_gate: also return the gate ``g`` (float32, shape ``h.shape[:-1]``). It is not
            differentiable (no gradient flows back through it).
        out: optional tensor to write `out` into instead of allocating: same shape, dtype and
            device as `h`, contiguous, aligned, not overlapping an input. With
            ``return_gate=True`` it may also be an ``(out, g)`` pair, `g` float32 of shape
            ``h.shape[:-1]`` (e.g. preallocated for CUDA graphs). Not allowed when the call is
            recorded by autograd.

    Returns:
        `out`, shaped and typed like `h` (the given tensor if `out` is given); with
        ``return_gate=True`` the pair ``(out, g)``. If `h` has no rows nothing is launched.

    Raises:
        TypeError: an input or `out` is not a tensor (or, with ``return_gate=True``, an
            ``(out, g)`` pair), has an unsupported dtype, or the dtypes differ; `eps` is not a
            real number.
        ValueError: `h` is 0-d or ``H == 0``; `k` differs from `h` in shape, `v` has neither
            h's shape nor the shared one; `w_h`/`w_k` are
            not ``(H,)``; a tensor is not on a CUDA device, not on the device of `h`, not
            contiguous or not 16-byte aligned; a dimension or element count reaches 2**31;
            `out` has the wrong shape or overlaps an input; `eps` < 0.
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
        >>> w_h = torch.ones(H, dtype=torch.bfloat16, device="cuda")
        >>> w_k = torch.ones(H, dtype=torch.bfloat16, device="cuda")
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
        and h.dim() == 2 == k.dim()
        and v.shape == h.shape  # `_C.call` can't tell a shared v ([MV, H] in the kernel) from it
        and w_h.dim() == 1 == w_k.dim()
        and not _needs_autograd(h, k, v, w_h, w_k)  # recorded calls: the checked path
    ):
        pair = _fast(h, k, v, w_h, w_k, eps, out, return_gate)
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
        result, gate = _autograd_function().apply(h, k, v, w_h, w_k, eps)
    else:
        result, gate = _forward(key, h, k, v, w_h, w_k, eps, out, return_gate)
    return (result, gate) if return_gate else result


def _fast(h, k, v, w_h, w_k, eps, out, return_gate):
    """The short path for plain 2-D torch tensors outside autograd: ``(out, gate)``, or None
    if `_lib.fast` declined (the checked path then runs). `out` as `_forward` takes it."""
    if out is None or type(out) is _arrays.Tensor:
        y = h.new_empty(h.shape) if out is None else out
        gate = h.new_empty(h.shape[0], dtype=_arrays._torch.float32)
    elif return_gate and _arrays.plain_pair(out, 2):
        y, gate = out
    else:
        return None
    if _lib.fast((_OP, h.dtype), (h, k, v, w_h, w_k, y, gate), (eps,), _WRITES_OUT_GATE):
        return y, gate
    return None


def _needs_autograd(*tensors: Any) -> bool:
    fw = _arrays.namespace(tensors[0])
    return fw.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _forward(key, h, k, v, w_h, w_k, eps, out, return_gate=False):
    """Validate, allocate, launch: ``(out, gate)``."""
    fw = _arrays.namespace(h)
    rows, n, v_rows, device, eps = check_inputs(h, k, v, w_h, w_k, eps)
    if out is None:
        y = fw.empty_like(h)  # h is contiguous, so y is too
        gate = h.new_empty(h.shape[:-1], dtype=fw.float32)
    elif return_gate and isinstance(out, (tuple, list)):
        if len(out) != 2:
            raise TypeError(f"out must be a tensor or an (out, g) pair; got {len(out)} items")
        y, gate = out
        _validate.check_out("out[0] (out)", y, h.dtype, h.shape, device)
        _validate.check_out("out[1] (g)", gate, fw.float32, h.shape[:-1], device)
        _validate.check_no_overlap(
            ("out[0] (out)", "out[1] (g)"), (y, gate), _INPUTS, (h, k, v, w_h, w_k)
        )
    else:
        _validate.check_out("out", out, h.dtype, h.shape, device)
        _validate.check_no_overlap(("out",), (out,), _INPUTS, (h, k, v, w_h, w_k))
        y = out
        gate = h.new_empty(h.shape[:-1], dtype=fw.float32)
    if rows == 0:
        return y, gate
    handle = _lib.handle(_OP, key)
    _lib.native().launch(
        handle,
        device,
        _lib.current_stream(device),
        (h.data_ptr(), k.data_ptr(), v.data_ptr(), w_h.data_ptr(), w_k.data_ptr(), y.data_ptr(),
         gate.data_ptr()),
        (rows, n, rows, n, v_rows, n, n, n, rows, n, rows),
        (eps,),
    )  # fmt: skip
    if type(h) is _arrays.Tensor and h.dim() == 2 and v_rows == rows:  # as `_fast` launches
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
            def forward(ctx, h, k, v, w_h, w_k, eps):
                key = _validate.dtype_key("h", h, _DTYPES)
                out, gate = _forward(key, h, k, v, w_h, w_k, eps, None)
                ctx.save_for_backward(h, k, v, w_h, w_k)
                ctx.eps = eps
                ctx.mark_non_differentiable(gate)
                return out, gate

            @staticmethod
            @once_differentiable
            def backward(ctx, grad_out, grad_gate):
                h, k, v, w_h, w_k = ctx.saved_tensors
                grads = engram_gate_backward(_validate.dense(grad_out), h, k, v, w_h, w_k, ctx.eps)
                need = ctx.needs_input_grad
                return (*(g if need[i] else None for i, g in enumerate(grads)), None)

        _FUNCTION = EngramGateFunction
    return _FUNCTION


def example_shapes(key: str) -> tuple[str, tuple[int, ...]]:
    """A typical call for `python -m tileaot info`: its description and flat shapes."""
    m, n = 4 * 4096, 7168
    return "h[4096, 4, 7168]", (m, n, m, n, m, n, n, n, m, n, m)
