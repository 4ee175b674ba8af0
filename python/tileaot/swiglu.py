"""SwiGLU activation of packed gate/up projections (op "swiglu")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "swiglu"
SCHEMA = OpSchema(
    _OP,
    "x[*M, 2*H]: T -> y[*M, H]: T as out",
    dtypes={"T": ("bf16", "fp16", "fp32")},
    example={"M": 4096, "H": 2048},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path


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
        if _lib.fast((_OP, x.dtype), (x, y), (), _WRITES):
            return y
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(swiglu, locals())
    bound = SCHEMA.bind({"x": x})
    (y,) = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, {"x": x})
    if y.numel() == 0:
        return y
    handle = SCHEMA.launch(bound.picked["T"], bound.device, (x, y), (), bound.dims)
    if type(x) is _arrays.Tensor:  # the short path passes (x, y) of a 2-D x: these shapes
        _lib.learn((_OP, x.dtype), handle)
    return y


example_shapes = SCHEMA.example_shapes
