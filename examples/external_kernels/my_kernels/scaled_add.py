"""``out = x + alpha * y`` over two equally shaped matrices: a user's own TileLang kernel.

One thread block per 1024 elements; the sum is formed in float32 and stored in the inputs'
dtype. Three things make it buildable by tileaot: the factory (a TileLang ``prim_func`` whose
parameters are the tensors, then the scalars), the schema (the contract the wheel's function,
torch op and C++ header are derived from, checked against every traced kernel) and the spec
(what to build: dtypes, sizes, archs).
"""

# No "from __future__ import annotations": TileLang evaluates the prim_func's annotations
# (T.Tensor((M, N), dtype)) eagerly and needs the factory's local variables.
from tileaot._schema import OpSchema

from kernels_py.spec import KernelSpec

DTYPES = ("bfloat16", "float16", "float32")
BLOCK = 1024  # elements per thread block
THREADS = 128

SCHEMA = OpSchema(
    "scaled_add",
    "x[M, N]: T, y[M, N]: T -> out[M, N]: T; alpha: float32",
    dtypes={"T": ("bf16", "fp16", "fp32")},
    example={"M": 4096, "N": 4096},
)


def factory(arch: str, dtype: str):
    """``(x[M, N], y[M, N], out[M, N], alpha: float32)``; the same code for every arch."""
    import tilelang.language as T

    M = T.dynamic("M")
    N = T.dynamic("N")

    @T.prim_func
    def scaled_add(
        x: T.Tensor((M, N), dtype),
        y: T.Tensor((M, N), dtype),
        out: T.Tensor((M, N), dtype),
        alpha: T.float32,
    ):
        # A 1-D grid over the M * N elements (< 2**31: the Python layer checks it): no grid
        # dimension limit to mind, whatever the matrix's shape.
        with T.Kernel(T.ceildiv(M * N, BLOCK), threads=THREADS) as bx:
            for j in T.Parallel(BLOCK):
                i = bx * BLOCK + j
                if i < M * N:
                    row, col = i // N, i % N
                    s = T.cast(x[row, col], "float32") + alpha * T.cast(y[row, col], "float32")
                    out[row, col] = T.cast(s, dtype)

    return scaled_add


def reference(x, y, alpha: float):
    """torch reference: float32 math, the result in x's dtype."""
    return (x.float() + alpha * y.float()).to(x.dtype)


SPEC = KernelSpec(
    op="scaled_add",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({},),
    reference=reference,
    doc="``out = x + alpha * y``, summed in float32 and stored in the dtype of `x`.",
    extra={"schema": SCHEMA},
)
