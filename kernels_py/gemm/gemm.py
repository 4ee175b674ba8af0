"""GEMM ``c = a @ b.T`` (a[M, K], b[N, K], c[M, N]) with fp32 accumulation.

One ``T.gemm`` tile loop; the tile configuration is chosen per arch, and TileLang 0.1.15
picks the instruction path from the target:

* sm_90a: TMA loads + mbarriers, a producer warpgroup (added by TileLang) and two consumer
  warpgroups issuing ``wgmma`` (128x256x64 tiles, 3 stages).
* sm_100f/sm_100a/sm_103a: ``T.gemm`` without tensor-memory accumulators lowers to TMA loads +
  warp-level ``mma.sync`` (no tcgen05): it compiles and runs, but is an sm_80-class path, and
  needs no "a" feature, so the default build makes it a family target (sm_100f).
* sm_120f/sm_120a/sm_121a (RTX 50, RTX PRO 6000, DGX Spark): TMA loads + ``mma.sync`` with the
  sm_80 tile (99 KiB of shared memory per block, as sm_86/89).
* sm_80/86/89: ``cp.async`` pipelining + ``ldmatrix`` + ``mma.sync``. With a dynamic K, 3+
  stages hit a TileLang 0.1.15 bug (the pipeline epilogue emits ``cp.async.wait_group`` with a
  non-constant count and codegen fails), so the generic variant uses 2 stages of 64-wide K
  tiles; the static-K specialisations use 3 stages.
* sm_75 (fp16 only): ``mma.sync`` m16n8k8, loads through registers (no cp.async on Turing).
* sm_70 (fp16 only): Volta ``mma.sync`` (m8n8k4) via ``tl::mma_sync_sm70``.

bf16 is not built for sm_70/sm_75: those GPUs have no bf16 tensor-core MMA and T.gemm falls
back to a naive scalar loop, far slower than any alternative; a loud miss is better.

Out-of-range tiles (M, N, K tails) are zero-filled on load (TMA or predicated cp.async) and
masked on store. The generic variant requires ``K % 8 == 0`` and ``N % 8 == 0`` (16-byte
row pitch: TMA descriptors and 16-byte cp.async need it).
"""

# No "from __future__ import annotations": TileLang evaluates prim_func annotations eagerly.

from dataclasses import dataclass

from ..spec import EVERY_ARCH_SEPARATE, KernelSpec

DTYPES = ("bfloat16", "float16")
SM80_CLASS = ("sm_80", "sm_86", "sm_89")
SM100_CLASS = ("sm_100a", "sm_100f", "sm_103a")
SM120_CLASS = ("sm_120f", "sm_120a", "sm_121a")
ARCHS = ("sm_70", "sm_75", *SM80_CLASS, "sm_90a", *SM100_CLASS, *SM120_CLASS)
# Common LLM projection shapes (M = tokens stays dynamic).
STATIC_NK = ({"N": 4096, "K": 4096}, {"N": 7168, "K": 2048}, {"N": 14336, "K": 4096})
RASTER_PANEL = 10  # block swizzle: walk tiles in panels of 10 for L2 reuse of a and b


@dataclass(frozen=True)
class Tile:
    block_m: int
    block_n: int
    block_k: int
    stages: int
    threads: int  # threads of the T.Kernel (TileLang adds a producer warpgroup on sm_90a+)


def tile_for(arch: str, static_k: bool) -> Tile:
    """Tile configuration for an arch; see the module docstring for why."""
    if arch == "sm_90a":
        return Tile(128, 256, 64, 3, 256)
    if arch in SM100_CLASS:
        return Tile(128, 128, 64, 3, 256)
    if arch in SM80_CLASS or arch in SM120_CLASS:
        return Tile(128, 128, 32, 3, 128) if static_k else Tile(128, 128, 64, 2, 128)
    if arch in ("sm_75", "sm_70"):
        return Tile(128, 128, 32, 2, 128)
    raise ValueError(f"gemm: no tile configuration for {arch!r}")


def factory(arch: str, dtype: str, N: int | None = None, K: int | None = None):
    """TileLang prim_func ``(a[M, K], b[N, K], c[M, N])``; c = a @ b.T in ``dtype``."""
    import tilelang.language as T

    if dtype not in DTYPES:
        raise ValueError(f"gemm: unsupported dtype {dtype!r}")
    tile = tile_for(arch, static_k=K is not None)
    bm, bn, bk = tile.block_m, tile.block_n, tile.block_k
    M = T.dynamic("M")
    N = T.dynamic("N") if N is None else N
    K = T.dynamic("K") if K is None else K

    @T.prim_func
    def gemm(
        a: T.Tensor((M, K), dtype),
        b: T.Tensor((N, K), dtype),
        c: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=tile.threads) as (bx, by):
            a_s = T.alloc_shared((bm, bk), dtype)
            b_s = T.alloc_shared((bn, bk), dtype)
            acc = T.alloc_fragment((bm, bn), "float32")
            T.use_swizzle(panel_size=RASTER_PANEL)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=tile.stages):
                T.copy(a[by * bm, k * bk], a_s)
                T.copy(b[bx * bn, k * bk], b_s)
                T.gemm(a_s, b_s, acc, transpose_B=True)
            T.copy(acc, c[by * bm, bx * bn])

    return gemm


def reference(a, b):
    """torch reference: fp32 matmul, cast to the input dtype."""
    return (a.float() @ b.float().T).to(a.dtype)


def _supports(arch: str, key, spec) -> bool:
    if arch in ("sm_70", "sm_75"):
        return key["dtype"] == "float16"  # no bf16 tensor-core MMA before sm_80
    return arch in ARCHS


def _constraints(key, spec) -> dict[str, int]:
    # 16-byte row pitch for TMA / cp.async; static sizes are already multiples of 8.
    return {dim: 8 for dim in ("N", "K") if dim not in spec}


SPEC = KernelSpec(
    op="gemm",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({}, *STATIC_NK),
    reference=reference,
    lowering_classes=EVERY_ARCH_SEPARATE,
    lowering_reason="tiles chosen per arch, wgmma on sm_90a: every arch lowers differently",
    supports=_supports,
    constraints=_constraints,
    doc="c[M, N] = a[M, K] @ b[N, K].T, fp32 accumulation, output in the input dtype.",
)
