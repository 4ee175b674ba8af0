"""SwiGLU activation of packed gate/up projections (op "swiglu")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib, _validate

if TYPE_CHECKING:
    import torch

_OP = "swiglu"
_WRITES_Y = 0b10  # `_lib.fast`: tensors (x, y), y written
_DTYPES = ("bf16", "fp16", "fp32")


def swiglu(x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """SwiGLU of gate and up projections packed in the last dimension of `x`.

    With ``H = x.shape[-1] // 2``, gate ``g = x[..., :H]`` and up ``u = x[..., H:]``::

        y = silu(g) * u = g / (1 + exp(-g)) * u

    computed in float32 (accurate ``expf``, IEEE division: bit-identical to those torch
    operations on CUDA tensors) and rounded once to the dtype of `x`.

    Args:
        x: CUDA tensor of shape ``(..., 2H)`` (any number of leading dims, viewed as
            ``[M, 2H]``), dtype ``torch.bfloat16``, ``torch.float16`` or ``torch.float32``;
            contiguous, with a 16-byte-aligned data pointer. Any ``H`` works; ``H`` a multiple
            of 8 (bf16/fp16) or 4 (fp32) gets 16-byte vector access.
        out: optional tensor to write into instead of allocating: shape ``(..., H)``, the
            dtype and device of `x`, contiguous, aligned, not overlapping `x`.

    Returns:
        `y`, shape ``(..., H)``, dtype of `x` (`out` itself if given). If `y` has no elements
        nothing is launched.

    Raises:
        TypeError: `x` or `out` is not a tensor or has an unsupported or mismatched dtype.
        ValueError: `x` is 0-d or its last dimension is odd; a tensor is not on a CUDA device
            (the same one), not contiguous or not 16-byte aligned; a dimension or element
            count reaches 2**31; `out` has the wrong shape or overlaps `x`.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype, shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `x`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(16, 2 * 2048, dtype=torch.bfloat16, device="cuda")  # gate | up
        >>> y = tileaot.swiglu(x)  # [16, 2048]
        >>> g, u = x.float().chunk(2, dim=-1)
        >>> torch.testing.assert_close(y, (torch.nn.functional.silu(g) * u).bfloat16())
    """
    if type(x) is _arrays.Tensor and x.dim() == 2:
        m, n2 = x.shape
        y = x.new_empty(m, n2 >> 1) if out is None else out
        if _lib.fast((_OP, x.dtype), (x, y), (), _WRITES_Y):
            return y
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(swiglu, locals())
    key = _validate.dtype_key("x", x, _DTYPES)
    shape = x.shape
    if not shape:
        raise ValueError("x must have shape (..., 2H); got a 0-d tensor")
    n2 = shape[-1]
    if n2 % 2:
        raise ValueError(
            f"x must have shape (..., 2H) (gate and up halves); its last dimension is {n2}, "
            "which is odd"
        )
    h = n2 // 2
    y_shape = (*shape[:-1], h)
    device = _validate.check_memory(("x",), (x,))
    if out is None:
        y = x.new_empty(y_shape)
    else:
        _validate.check_out("out", out, x.dtype, y_shape, device)
        _validate.check_no_overlap(("out",), (out,), ("x",), (x,))
        y = out
    if y.numel() == 0:
        return y
    m = x.numel() // n2
    handle = _lib.handle(_OP, key)
    _lib.native().launch(
        handle,
        device,
        _lib.current_stream(device),
        (x.data_ptr(), y.data_ptr()),
        (m, n2, m, h),
        (),
    )
    if type(x) is _arrays.Tensor:  # the short path passes (x, y) of a 2-D x: these shapes
        _lib.learn((_OP, x.dtype), handle)
    return y


def example_shapes(key: str) -> tuple[str, tuple[int, ...]]:
    """A typical call for `python -m tileaot info`: its description and flat shapes."""
    return "x[4096, 2 * 2048]", (4096, 4096, 4096, 2048)
