"""Sinkhorn normalisation of small square matrices (op "sinkhorn_normalize"), differentiable."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _grad, _lib
from ._schema import OpSchema
from ._sinkhorn_args import _INF, MAX_N, MAX_REPEAT, check_args

if TYPE_CHECKING:
    import torch

_OP = "sinkhorn_normalize"
SCHEMA = OpSchema(
    _OP,
    "logits[*M, N, N]: fp32 -> out[*M, N, N]: fp32; repeat: int32, eps: float32",
    key="fp32",
    example={"M": 32768, "N": 4},
    backward="sinkhorn_normalize_backward",
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
_FAST_KEY = (_OP, "fp32")  # `_lib.fast`: tensors (logits, p) of a 3-D logits


def sinkhorn_normalize(
    logits: torch.Tensor,
    repeat: int = 10,
    eps: float = 1e-6,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sinkhorn-normalise each ``N x N`` matrix of `logits` towards a doubly stochastic one.

    TileKernels' mHC Sinkhorn (`tile-kernels` 1.0.0: ``sinkhorn_normalize`` in
    ``tile_kernels.modeling.mhc.ops``, reference ``tile_kernels.torch.sinkhorn_normalize_ref``;
    same name, arguments and defaults). For each matrix, in float32::

        P = softmax(logits, dim=-1) + eps                  # row softmax (max-subtracted), + eps
        P = P / (P.sum(dim=-2, keepdim=True) + eps)        # normalise columns
        for _ in range(repeat - 1):
            P = P / (P.sum(dim=-1, keepdim=True) + eps)    # rows
            P = P / (P.sum(dim=-2, keepdim=True) + eps)    # then columns

    so every column of the result sums to ``1 - O(eps)`` and rows approach 1 as `repeat`
    grows. Results match a float64 evaluation to about 1e-6 relative (float32 rounding), within
    the float32 tolerances of ``torch.testing.assert_close`` that TileKernels' test uses.

    Differentiable: if `logits` requires grad (and grad mode is on), the result carries a
    ``grad_fn`` whose backward is :func:`tileaot.sinkhorn_normalize_backward` (the forward is
    recomputed there; nothing but `logits` is saved). Double backward is not supported.

    Args:
        logits: CUDA tensor ``[..., N, N]`` (leading dims are a batch of T matrices),
            ``torch.float32``, ``1 <= N <= 16`` (N = 4 and N = 8 have the fastest kernels),
            contiguous, with a 16-byte-aligned data pointer.
        repeat: number of column normalisations (the first, then ``repeat - 1`` (row,
            column) pairs), an int in ``[1, 65536]``. (TileKernels computes the same for 0 as
            for 1; 0 is rejected here rather than silently meaning 1.)
        eps: added to every sum before dividing; a finite float ``>= 0``.
        out: optional tensor to write into instead of allocating: same shape, dtype and device
            as `logits`, contiguous, aligned, not overlapping it. Not allowed when the call
            records a gradient (as for torch's own ``out=`` functions).

    Returns:
        ``P``, the shape of `logits`, ``torch.float32`` (`out` itself if given). If `logits`
        has no elements, ``P`` is returned without launching anything.

    Raises:
        TypeError: `logits`/`out` is not a tensor or not float32; `repeat` is not an int;
            `eps` is not a real number.
        ValueError: `logits` has fewer than 2 dims, non-square last dims or N > 16; `repeat`
            outside [1, 65536]; `eps` < 0 or not finite; a tensor is not on a CUDA device (the
            same one), not contiguous or not 16-byte aligned; a size reaches 2**31; `out` has
            the wrong shape, overlaps `logits`, or is given while a gradient is recorded.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `logits`' device (as torch ops are);
    the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> logits = torch.randn(32768, 4, 4, device="cuda", requires_grad=True)
        >>> p = tileaot.sinkhorn_normalize(logits, repeat=20, eps=1e-6)
        >>> p.sum(dim=-2)  # ~1
        >>> p.square().sum().backward()  # logits.grad via sinkhorn_normalize_backward
    """
    if (
        type(logits) is _arrays.Tensor
        and type(repeat) is int
        and type(eps) is float
        and 1 <= repeat <= MAX_REPEAT
        and 0.0 <= eps < _INF
        and logits.dim() == 3
        and logits.shape[2] <= MAX_N
        and not logits.requires_grad
    ):
        p = logits.new_empty(logits.shape) if out is None else out
        if _lib.fast(_FAST_KEY, (logits, p), (repeat, eps), _WRITES):
            return p
    elif type(logits) is not _arrays.Tensor and _arrays.foreign(logits):
        return _arrays.call(sinkhorn_normalize, locals())
    bound = SCHEMA.bind({"logits": logits})
    repeat, eps = check_args("logits", bound.dims["N"], repeat, eps)
    if logits.requires_grad and _arrays.namespace(logits).is_grad_enabled():
        if out is not None:
            raise ValueError(
                "out= is not allowed when logits requires grad (the result would not be "
                "differentiable): pass out=None, or call under torch.no_grad()"
            )
        return _grad.function(SCHEMA, _autograd_forward, 1).apply(logits, repeat, eps)
    return _forward(logits, repeat, eps, out, bound)


def _autograd_forward(logits: Any, repeat: int, eps: float) -> torch.Tensor:
    return _forward(logits, repeat, eps, None)


def _forward(
    logits: torch.Tensor, repeat: int, eps: float, out: torch.Tensor | None, bound: Any = None
) -> torch.Tensor:
    """The launch of a checked call (`bound`: its `SCHEMA.bind`, done again if None)."""
    if bound is None:
        bound = SCHEMA.bind({"logits": logits})
    inputs = {"logits": logits}
    (p,) = SCHEMA.outputs(_arrays.namespace(logits), logits, bound, out, inputs)
    if logits.numel() == 0:
        return p
    handle = SCHEMA.launch("fp32", bound.device, (logits, p), (repeat, eps), bound.dims)
    if type(logits) is _arrays.Tensor:  # the short path passes (logits, p) of a 3-D logits
        _lib.learn(_FAST_KEY, handle)
    return p


example_shapes = SCHEMA.example_shapes
