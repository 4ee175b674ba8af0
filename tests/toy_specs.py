"""Two tiny ops for testing build_tools quickly (lowering the real matrix takes minutes)."""

from __future__ import annotations

from kernels_py.spec import KernelSpec


def _scale_factory(arch: str, dtype: str, N: int | None = None):
    import tilelang.language as T

    M = T.dynamic("M")
    N = N or T.dynamic("N")

    @T.prim_func
    def main(
        X: T.Tensor((M, N), dtype),
        S: T.Tensor((M, T.ceildiv(N, 128)), "float32"),
        Y: T.Tensor((M, N), dtype),
        eps: T.float32,
    ):
        with T.Kernel(T.ceildiv(N, 128), M, threads=128) as (bx, by):
            for i in T.Parallel(128):
                if bx * 128 + i < N:
                    Y[by, bx * 128 + i] = T.Cast(
                        dtype, T.Cast("float32", X[by, bx * 128 + i]) * eps
                    )

    return main


def _gemm_factory(arch: str, dtype: str):
    import tilelang.language as T

    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    bm = bn = 128
    bk = 64

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            a_s = T.alloc_shared((bm, bk), dtype)
            b_s = T.alloc_shared((bn, bk), dtype)
            acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=3):
                T.copy(A[by * bm, k * bk], a_s)
                T.copy(B[bx * bn, k * bk], b_s)
                T.gemm(a_s, b_s, acc, transpose_B=True)
            T.copy(acc, C[by * bm, bx * bn])

    return main


def all_specs():
    return [
        KernelSpec(
            "toy_scale", _scale_factory, ({"dtype": "bfloat16"},), ({}, {"N": 256}), reference=None
        ),
        KernelSpec(
            "toy_gemm",
            _gemm_factory,
            ({"dtype": "bfloat16"},),
            ({},),
            reference=None,
            supports=lambda arch, key, spec: arch == "sm_90a",
            constraints=lambda key, spec: {"K": 8},
        ),
    ]
