// Design probe for moe_expand's copy (bench/expand_order_probe.py builds and drives it): the
// same bytes moved in two orders, with and without L2 eviction hints. bf16 rows of H = 7168
// (896 16-byte vectors), 128 threads per block, 7 vectors per thread.
//
//   scatter<HINT>:          one block per token: load its row once, store it to its K rows
//                           (tileaot's moe_expand copy before 2026-11-29, session 7).
//   gather<HINT, ROWS>:     one block per ROWS slots of a work list of entries g = t * K + j:
//                           load x[g / K], store it to row pos[g]. The work list's order
//                           decides where the blocks in flight write.
//
// HINT bit 0: loads with an L2 evict-last policy. HINT >> 1: stores plain (0), with an L2
// evict-first policy (1), or st.global.cs (2). Exported C functions take device pointers and a
// cudaStream_t as void*; they return the cudaError_t of the launch.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 128;
constexpr int kVectors = 896;  // 7168 bf16
constexpr int kPerThread = (kVectors + kThreads - 1) / kThreads;

__device__ __forceinline__ uint64_t policy_first() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

__device__ __forceinline__ uint64_t policy_last() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}

template <int HINT>
__device__ __forceinline__ uint4 load(const uint4* a, uint64_t last) {
  uint4 v;
  if (HINT & 1) {
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(a), "l"(last));
  } else {
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(a));
  }
  return v;
}

template <int HINT>
__device__ __forceinline__ void store(uint4* a, uint4 v, uint64_t first) {
  if ((HINT >> 1) == 1) {
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1,%2,%3,%4}, %5;" ::"l"(a), "r"(v.x),
                 "r"(v.y), "r"(v.z), "r"(v.w), "l"(first)
                 : "memory");
  } else if ((HINT >> 1) == 2) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(a), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
  } else {
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(a), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
  }
}

template <int HINT>
__global__ void __launch_bounds__(kThreads)
    scatter(const uint4* x, const int* pos, uint4* out, int k) {
  const int t = blockIdx.x;
  const uint64_t first = policy_first(), last = policy_last();
  uint4 f[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int c = u * kThreads + threadIdx.x;
    if (c < kVectors) f[u] = load<HINT>(x + size_t(t) * kVectors + c, last);
  }
  for (int j = 0; j < k; ++j) {
    const int p = pos[t * k + j];
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      const int c = u * kThreads + threadIdx.x;
      if (c < kVectors) store<HINT>(out + size_t(p) * kVectors + c, f[u], first);
    }
  }
}

template <int HINT, int ROWS>
__global__ void __launch_bounds__(kThreads)
    gather(const uint4* x, const int* work, const int* pos, uint4* out, int n, int k) {
  const uint64_t first = policy_first(), last = policy_last();
  uint4 f[ROWS][kPerThread];
  int dst[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int w = blockIdx.x * ROWS + r;
    const int g = w < n ? work[w] : -1;
    const int src = g >= 0 ? g / k : -1;
    dst[r] = g >= 0 ? pos[g] : -1;
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      const int c = u * kThreads + threadIdx.x;
      f[r][u] = make_uint4(0, 0, 0, 0);
      if (c < kVectors && src >= 0) f[r][u] = load<HINT>(x + size_t(src) * kVectors + c, last);
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    if (dst[r] < 0) continue;
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      const int c = u * kThreads + threadIdx.x;
      if (c < kVectors) store<HINT>(out + size_t(dst[r]) * kVectors + c, f[r][u], first);
    }
  }
}

template <int HINT, int ROWS>
void launch_gather(const void* x, const int* work, const int* pos, void* out, int n, int k,
                   cudaStream_t s) {
  gather<HINT, ROWS><<<(n + ROWS - 1) / ROWS, kThreads, 0, s>>>(
      static_cast<const uint4*>(x), work, pos, static_cast<uint4*>(out), n, k);
}

template <int HINT>
void launch_gather_rows(int rows, const void* x, const int* work, const int* pos, void* out, int n,
                        int k, cudaStream_t s) {
  if (rows == 2) {
    launch_gather<HINT, 2>(x, work, pos, out, n, k, s);
  } else {
    launch_gather<HINT, 1>(x, work, pos, out, n, k, s);
  }
}

}  // namespace

extern "C" int expand_scatter(int hint, const void* x, const int* pos, void* out, int tokens, int k,
                              void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  auto xs = static_cast<const uint4*>(x);
  auto o = static_cast<uint4*>(out);
  if (hint == 2) {
    scatter<2><<<tokens, kThreads, 0, s>>>(xs, pos, o, k);
  } else if (hint == 4) {
    scatter<4><<<tokens, kThreads, 0, s>>>(xs, pos, o, k);
  } else {
    scatter<0><<<tokens, kThreads, 0, s>>>(xs, pos, o, k);
  }
  return static_cast<int>(cudaGetLastError());
}

extern "C" int expand_gather(int hint, int rows, const void* x, const int* work, const int* pos,
                             void* out, int n, int k, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (hint) {
    case 1:
      launch_gather_rows<1>(rows, x, work, pos, out, n, k, s);
      break;
    case 2:
      launch_gather_rows<2>(rows, x, work, pos, out, n, k, s);
      break;
    case 3:
      launch_gather_rows<3>(rows, x, work, pos, out, n, k, s);
      break;
    case 4:
      launch_gather_rows<4>(rows, x, work, pos, out, n, k, s);
      break;
    case 5:
      launch_gather_rows<5>(rows, x, work, pos, out, n, k, s);
      break;
    default:
      launch_gather_rows<0>(rows, x, work, pos, out, n, k, s);
      break;
  }
  return static_cast<int>(cudaGetLastError());
}
