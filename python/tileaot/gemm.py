"""Matrix multiply ``c = a @ b.T`` (op "gemm")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "gemm"
SCHEMA = OpSchema(
    _OP,
    "a[M, K]: T, b[N, K]: T -> c[M, N]: T as out",
    dtypes={"T": ("bf16", "fp16")},
    example={"M": 4096, "N": 4096, "K": 4096},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
_ROW_ALIGN = 8  # elements per 16 bytes of bf16/fp16: K and N rows must be whole 16-byte units


def gemm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """Multiply `a` by the transpose of `b`: ``c[i, j] = sum_k a[i, k] * b[j, k]``.

    Both operands are K-major (``b`` is stored ``[N, K]``, as ``torch.nn.Linear`` stores its
    weight), accumulated in float32 and written in the input dtype.

    Args:
        a: CUDA tensor ``[M, K]``, dtype ``torch.bfloat16`` or ``torch.float16``; contiguous,
            16-byte-aligned data pointer; ``K % 8 == 0``.
        b: CUDA tensor ``[N, K]``, same dtype and device as `a`, contiguous, aligned;
            ``N % 8 == 0``.
        out: optional ``[M, N]`` tensor of the dtype of `a` to write into instead of
            allocating; same device, contiguous, aligned, not overlapping `a` or `b`.

    Returns:
        `c`, ``[M, N]`` in the dtype of `a` (`out` itself if given). Nothing is launched when
        ``M == 0`` or ``N == 0`` (an empty `c`) or ``K == 0`` (`c` filled with zeros).

    Raises:
        TypeError: `a`/`b`/`out` is not a tensor, has an unsupported dtype, or the dtypes differ.
        ValueError: `a` or `b` is not 2-D or their K differ; ``K % 8`` or ``N % 8`` is not 0; a
            tensor is not on a CUDA device (the same one), not contiguous or not 16-byte
            aligned; a dimension or element count (including ``M * N``) reaches 2**31; `out`
            has the wrong shape or overlaps an input.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype, shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `a`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> a = torch.randn(512, 1024, dtype=torch.bfloat16, device="cuda")
        >>> w = torch.randn(256, 1024, dtype=torch.bfloat16, device="cuda")  # Linear weight
        >>> c = tileaot.gemm(a, w)  # [512, 256], like torch.nn.functional.linear(a, w)
        >>> torch.testing.assert_close(c, a @ w.T, rtol=1e-2, atol=1e-1)
    """
    if (
        type(a) is _arrays.Tensor
        and isinstance(b, _arrays.Tensor)  # an nn.Linear weight (nn.Parameter) too
        and a.dim() == 2 == b.dim()
    ):
        c = a.new_empty(a.shape[0], b.shape[0]) if out is None else out
        if _lib.fast((_OP, a.dtype), (a, b, c), (), _WRITES):
            return c
    elif type(a) is not _arrays.Tensor and _arrays.foreign(a):
        return _arrays.call(gemm, locals())
    inputs = {"a": a, "b": b}
    bound = SCHEMA.bind(inputs)
    k, n = bound.dims["K"], bound.dims["N"]
    if k % _ROW_ALIGN or n % _ROW_ALIGN:
        raise ValueError(
            f"gemm needs K % {_ROW_ALIGN} == 0 and N % {_ROW_ALIGN} == 0 (16-byte rows); got "
            f"K = {k}, N = {n}: pad a and b with zero columns / b with zero rows"
        )
    (c,) = SCHEMA.outputs(_arrays.namespace(a), a, bound, out, inputs)
    if bound.dims["M"] == 0 or n == 0:
        return c
    if k == 0:
        return c.zero_()
    handle = SCHEMA.launch(bound.picked["T"], bound.device, (a, b, c), (), bound.dims)
    if type(a) is _arrays.Tensor:  # the short path passes (a, b, c): these shapes
        _lib.learn((_OP, a.dtype), handle)
    return c


example_shapes = SCHEMA.example_shapes
