"""Matrix multiply ``c = a @ b.T`` (op "gemm")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib, _validate

if TYPE_CHECKING:
    import torch

_OP = "gemm"
_DTYPES = ("bf16", "fp16")
_WRITES_C = 0b100  # `_lib.fast`: tensors (a, b, c), c written
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
        if _lib.fast((_OP, a.dtype), (a, b, c), (), _WRITES_C):
            return c
    elif type(a) is not _arrays.Tensor and _arrays.foreign(a):
        return _arrays.call(gemm, locals())
    key = _validate.dtype_key("a", a, _DTYPES)
    _validate.same_dtype("b", b, "a", a)
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(
            f"a must be [M, K] and b [N, K]; got a {tuple(a.shape)}, b {tuple(b.shape)}"
        )
    m, k = a.shape
    n, k_b = b.shape
    if k_b != k:
        raise ValueError(
            f"a is [M, K] = {tuple(a.shape)}, so b must be [N, K] with K = {k} (c = a @ b.T); "
            f"got b {tuple(b.shape)}"
        )
    if k % _ROW_ALIGN or n % _ROW_ALIGN:
        raise ValueError(
            f"gemm needs K % {_ROW_ALIGN} == 0 and N % {_ROW_ALIGN} == 0 (16-byte rows); got "
            f"K = {k}, N = {n}: pad a and b with zero columns / b with zero rows"
        )
    device = _validate.check_memory(("a", "b"), (a, b))
    if m * n >= _validate.INT32_LIMIT:
        _validate.check_size("c = a @ b.T", (m, n))
    if out is None:
        c = a.new_empty(m, n)  # sizes as varargs: 1 us faster than a tuple
    else:
        _validate.check_out("out", out, a.dtype, (m, n), device)
        _validate.check_no_overlap(("out",), (out,), ("a", "b"), (a, b))
        c = out
    if m == 0 or n == 0:
        return c
    if k == 0:
        return c.zero_()
    handle = _lib.handle(_OP, key)
    _lib.native().launch(
        handle,
        device,
        _lib.current_stream(device),
        (a.data_ptr(), b.data_ptr(), c.data_ptr()),
        (m, k, n, k, m, n),
        (),
    )
    if type(a) is _arrays.Tensor:  # the short path passes (a, b, c): these shapes
        _lib.learn((_OP, a.dtype), handle)
    return c


def example_shapes(key: str) -> tuple[str, tuple[int, ...]]:
    """A typical call for `python -m tileaot info`: its description and flat shapes."""
    return "a[4096, 4096] b[4096, 4096]", (4096, 4096, 4096, 4096, 4096, 4096)
