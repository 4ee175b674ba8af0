"""RMSNorm over the last dimension: ``y = x * rsqrt(mean(x^2) + eps) * weight``.

Math is fp32 throughout; only the final store casts to the input dtype. One row per thread
block (memory-bound: one read of x, one write of y, weight served from L1/L2).

* Static N (``{"N": 4096}``): the whole row lives in registers as a fragment; TileLang
  vectorises the loads/stores to 16 bytes and reduces with a block all-reduce. The thread
  count is a power of two (the all-reduce's butterfly) of about 32 fp32 values each. Where
  no such count divides N into whole 16-byte vectors with at most ``MAX_PER_THREAD`` values
  per thread (N = 2880, 5376, 128 ...), the row fragment is padded to a whole number of
  thread x vector tiles and the padding is predicated off per 16-byte vector (loads give 0,
  which adds nothing to the sum of squares; stores are skipped), so any N that is a whole
  number of 16-byte vectors specialises.
* Generic (``{}``, M and N dynamic): two passes over the row in chunks (sum of squares, then
  scale and store; the second read hits L1/L2). A runtime branch picks 16-byte vector access
  when ``N`` is a multiple of the vector width and scalar access otherwise, so any N works.

Every loop touching global memory carries ``coalesced_width`` = one 16-byte vector: without
it TileLang 0.1.15 emits 32-byte ``ld/st.global.v8`` on sm_100a, which needs 32-byte aligned
pointers (the Python layer promises 16) and miscompiles fp32 broadcasts there (an rvalue's
address is taken). The kernels assume 16-byte aligned base pointers.
"""

# No "from __future__ import annotations": TileLang evaluates the prim_func annotations
# (T.Tensor((M, n), dtype)) eagerly and needs the factory's local variables.
from ..spec import BY_GENERATION, KernelSpec

DTYPES = ("bfloat16", "float16", "float32")
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}
STATIC_N = (2048, 4096, 7168, 8192)
# Hidden sizes and q/k-norm head dims of the model zoo (examples/models, SOURCES.md) beyond
# STATIC_N, specialised for bf16 only (every zoo model runs bf16 activations): 128 head_dim
# (Qwen3, GLM-4.5 q/k norms), 512 and 1536 (DeepSeek-V2/V3 kv/q LoRA norms), 2880 (gpt-oss),
# 3584 (Qwen2-57B), 5120 (GLM-4.5), 6144 (Mixtral-8x22B).
ZOO_N = (128, 512, 1536, 2880, 3584, 5120, 6144)
ZOO_DTYPES = ("bfloat16",)
MAX_PER_THREAD = 64  # fp32 row values per thread before the padded (tail) layout is preferred

GENERIC_THREADS = 128  # threads per row in the generic kernel
GENERIC_UNROLL = 2  # 16-byte vectors per thread per chunk: two loads in flight per thread
SCALAR_PER_THREAD = 4  # scalar elements per thread per chunk on the unaligned (odd N) path


def factory(arch: str, dtype: str, N: int | None = None):
    """TileLang prim_func ``(x[M, N], weight[N], y[M, N], eps: float32)``.

    The same code serves every CUDA arch, so ``arch`` only takes part in the interface.
    """
    if dtype not in DTYPES:
        raise ValueError(f"rms_norm: unsupported dtype {dtype!r}")
    return _generic(dtype) if N is None else _static(dtype, N)


def _row_threads(n: int, vec: int) -> int:
    """Threads for a register-resident row: about 32 fp32 values each, whole 16-byte vectors.

    A power of two: TileLang's block all-reduce (XOR butterfly) requires it.
    """
    threads = 1024
    while threads > 32 and (threads * 32 > max(n, 128 * 32) or (n // vec) % threads):
        threads //= 2
    if n % vec or (n // vec) % threads:
        raise ValueError(f"rms_norm: no thread count fits N={n}")
    return threads


def row_layout(n: int, vec: int) -> tuple[int, int]:
    """(threads, padded row length) of the static kernel for N = ``n``.

    The exact layout (padded length ``n``) where a power-of-two thread count divides the row
    into whole vectors with at most MAX_PER_THREAD values each; otherwise the thread count the
    exact rule aims for (about 32 values each, 32 to 1024, no more than one tile covers)
    over a row padded up to whole thread x vector tiles. Raises ValueError when ``n`` is not
    a whole number of vectors.
    """
    if n % vec:
        raise ValueError(f"rms_norm: a static N must be a multiple of {vec} (16 bytes); got {n}")
    try:
        threads = _row_threads(n, vec)
    except ValueError:
        threads = 0
    if threads and n // threads <= MAX_PER_THREAD:
        return threads, n
    threads = 1024
    while threads > 32 and threads * 32 > max(n, 128 * 32):
        threads //= 2
    while threads > 32 and threads // 2 * vec >= n:  # a short row: no idle half-blocks
        threads //= 2
    tile = threads * vec
    return threads, -(-n // tile) * tile


def _static(dtype: str, n: int):
    import tilelang.language as T

    vec = 16 // ITEMSIZE[dtype]
    threads, padded = row_layout(n, vec)
    if padded != n:
        return _static_padded(dtype, n, threads, padded)
    width = T.int32(vec)  # coalesced_width must be an IntImm, not a Python int
    M = T.dynamic("M")

    @T.prim_func
    def rms_norm(
        x: T.Tensor((M, n), dtype),
        weight: T.Tensor((n,), dtype),
        y: T.Tensor((M, n), dtype),
        eps: T.float32,
    ):
        with T.Kernel(M, threads=threads) as row:
            xr = T.alloc_fragment((n,), "float32")
            sq = T.alloc_fragment((n,), "float32")
            rstd = T.alloc_fragment((1,), "float32")
            for j in T.Parallel(n, coalesced_width=width):
                xr[j] = x[row, j]
            for j in T.Parallel(n):
                sq[j] = xr[j] * xr[j]
            T.reduce_sum(sq, rstd, dim=0)
            rstd[0] = T.rsqrt(rstd[0] / T.float32(n) + eps)
            for j in T.Parallel(n, coalesced_width=width):
                y[row, j] = xr[j] * rstd[0] * weight[j]

    return rms_norm


def _static_padded(dtype: str, n: int, threads: int, padded: int):
    """The static kernel over a row fragment padded to ``padded`` = whole thread x vector tiles.

    Loops run over (vector, element) so the predicate (``vector < n / vec``) is uniform
    within each 16-byte vector and the accesses stay 16-byte wide.
    """
    import tilelang.language as T

    vec = 16 // ITEMSIZE[dtype]
    nvec, pvec = n // vec, padded // vec
    width = T.int32(vec)
    M = T.dynamic("M")

    @T.prim_func
    def rms_norm(
        x: T.Tensor((M, n), dtype),
        weight: T.Tensor((n,), dtype),
        y: T.Tensor((M, n), dtype),
        eps: T.float32,
    ):
        with T.Kernel(M, threads=threads) as row:
            xr = T.alloc_fragment((pvec, vec), "float32")
            sq = T.alloc_fragment((pvec, vec), "float32")
            part = T.alloc_fragment((pvec,), "float32")
            rstd = T.alloc_fragment((1,), "float32")
            for v, e in T.Parallel(pvec, vec, coalesced_width=width):
                xr[v, e] = T.if_then_else(v < nvec, x[row, v * vec + e], 0)
            for v, e in T.Parallel(pvec, vec):
                sq[v, e] = xr[v, e] * xr[v, e]
            T.reduce_sum(sq, part, dim=1)
            T.reduce_sum(part, rstd, dim=0)
            rstd[0] = T.rsqrt(rstd[0] / T.float32(n) + eps)
            for v, e in T.Parallel(pvec, vec, coalesced_width=width):
                if v < nvec:
                    y[row, v * vec + e] = xr[v, e] * rstd[0] * weight[v * vec + e]

    return rms_norm


def _generic(dtype: str):
    import tilelang.language as T

    vec = 16 // ITEMSIZE[dtype]
    M = T.dynamic("M")
    N = T.dynamic("N")
    vec_rows = _row_pass(T, N, GENERIC_THREADS * vec * GENERIC_UNROLL, T.int32(vec))
    scalar_rows = _row_pass(T, N, GENERIC_THREADS * SCALAR_PER_THREAD, None)

    @T.prim_func
    def rms_norm(
        x: T.Tensor((M, N), dtype),
        weight: T.Tensor((N,), dtype),
        y: T.Tensor((M, N), dtype),
        eps: T.float32,
    ):
        with T.Kernel(M, threads=GENERIC_THREADS) as row:
            if N % vec == 0:
                # Rows start 16-byte aligned: tell the vectoriser so it emits 16-byte accesses.
                T.assume(N % vec == 0)
                vec_rows(x, weight, y, eps, row)
            else:
                scalar_rows(x, weight, y, eps, row)

    return rms_norm


def _row_pass(T, N, chunk: int, width):
    """Macro normalising one row of dynamic length N, ``chunk`` elements per step.

    ``width`` (an IntImm or None) is the loops' coalesced_width; it is bound here rather than
    passed as a macro argument because macro arguments reach the loop as non-constants.
    """

    @T.macro
    def normalise_row(x, weight, y, eps, row):
        acc = T.alloc_fragment((chunk,), "float32")
        rstd = T.alloc_fragment((1,), "float32")
        # Pass 1: per-thread partial sums of squares, then one block all-reduce.
        T.clear(acc)
        for c in T.serial(T.ceildiv(N, chunk)):
            for j in T.Parallel(chunk, coalesced_width=width):
                if c * chunk + j < N:
                    v = T.cast(x[row, c * chunk + j], "float32")
                    acc[j] += v * v
        T.reduce_sum(acc, rstd, dim=0)
        rstd[0] = T.rsqrt(rstd[0] / T.cast(N, "float32") + eps)
        # Pass 2: re-read the row (L1/L2 hit), scale and store.
        for c in T.serial(T.ceildiv(N, chunk)):
            for j in T.Parallel(chunk, coalesced_width=width):
                if c * chunk + j < N:
                    col = c * chunk + j
                    y[row, col] = T.cast(x[row, col], "float32") * rstd[0] * weight[col]

    return normalise_row


def reference(x, weight, eps: float = 1e-6):
    """torch reference: fp32 math, result in x's dtype."""
    import torch

    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xf * rstd * weight.float()).to(x.dtype)


def _supports(arch: str, key, spec) -> bool:
    """The zoo's extra sizes (ZOO_N) are built for ZOO_DTYPES only."""
    return spec.get("N") not in ZOO_N or key["dtype"] in ZOO_DTYPES


SPEC = KernelSpec(
    op="rms_norm",
    factory=factory,
    keys=tuple({"dtype": d} for d in DTYPES),
    specs=({}, *({"N": n} for n in STATIC_N), *({"N": n} for n in ZOO_N)),
    reference=reference,
    lowering_classes=BY_GENERATION,
    lowering_reason="block reductions: named barrier from sm_80; fp32 pairs packed from sm_100",
    supports=_supports,
    doc="y = x * rsqrt(mean(x^2, -1) + eps) * weight (fp32 math); x[M, N], weight[N].",
)
