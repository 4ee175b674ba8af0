// Design probe for moe_reduce (bench/reduce_probe.py builds and drives it): the gather-sum
// out[t] = sum_j w[t, j] * y[pos[t, j]] (bf16 y and out, fp32 FMA in slot order, as tileaot's
// kernel) with more rows in flight per thread or with cache hints on the loads.
//
// Grid (T, 2) of 128 threads; each thread owns 4 16-byte vectors (32 columns) of a 4096-column
// chunk of H = 7168. GROUP slots' loads are issued before any of them is accumulated. HINT 0:
// plain loads; 1: L1::no_allocate with an L2 evict-first policy (and evict-first stores);
// 2: ld.global.nc.L1::no_allocate. Exported C function: device pointers, stream as void*.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 128;
constexpr int kVectors = 896;  // 7168 bf16
constexpr int kRuns = 4;       // vectors per thread per block column
constexpr int kMaxK = 64;

template <int HINT>
__device__ __forceinline__ uint4 load(const uint4* a, uint64_t first) {
  uint4 v;
  if (HINT == 1) {
    asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(a), "l"(first));
  } else if (HINT == 2) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(a));
  } else {
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(a));
  }
  return v;
}

template <int HINT>
__device__ __forceinline__ void store(uint4* a, uint4 v, uint64_t first) {
  if (HINT == 1) {
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1,%2,%3,%4}, %5;" ::"l"(a), "r"(v.x),
                 "r"(v.y), "r"(v.z), "r"(v.w), "l"(first)
                 : "memory");
  } else {
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(a), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
  }
}

__device__ __forceinline__ void fma8(float* acc, uint4 v, float w) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    acc[2 * i] = fmaf(w, f.x, acc[2 * i]);
    acc[2 * i + 1] = fmaf(w, f.y, acc[2 * i + 1]);
  }
}

template <int HINT, int GROUP>
__global__ void __launch_bounds__(kThreads)
    reduce(const uint4* y, const int* pos, const float* weights, uint4* out, int k, int rows) {
  const int t = blockIdx.x, c = blockIdx.y;
  uint64_t first;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(first));
  __shared__ int slot_pos[kMaxK];
  __shared__ float slot_w[kMaxK];
  if (threadIdx.x < k) {
    slot_pos[threadIdx.x] = pos[t * k + threadIdx.x];
    slot_w[threadIdx.x] = weights[t * k + threadIdx.x];
  }
  __syncthreads();
  float acc[kRuns][8] = {};
  for (int j0 = 0; j0 < k; j0 += GROUP) {
    uint4 buf[GROUP][kRuns];
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      const int p = j0 + g < k ? slot_pos[j0 + g] : -1;
#pragma unroll
      for (int u = 0; u < kRuns; ++u) {
        const int col = (c * kRuns + u) * kThreads + threadIdx.x;
        buf[g][u] = make_uint4(0, 0, 0, 0);
        if (p >= 0 && p < rows && col < kVectors) {
          buf[g][u] = load<HINT>(y + size_t(p) * kVectors + col, first);
        }
      }
    }
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      const int p = j0 + g < k ? slot_pos[j0 + g] : -1;
      if (p < 0 || p >= rows) continue;
#pragma unroll
      for (int u = 0; u < kRuns; ++u) fma8(acc[u], buf[g][u], slot_w[j0 + g]);
    }
  }
#pragma unroll
  for (int u = 0; u < kRuns; ++u) {
    const int col = (c * kRuns + u) * kThreads + threadIdx.x;
    if (col >= kVectors) continue;
    uint4 o;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(acc[u][2 * i], acc[u][2 * i + 1]);
    store<HINT>(out + size_t(t) * kVectors + col, o, first);
  }
}

template <int HINT, int GROUP>
void launch(const void* y, const int* pos, const float* w, void* out, int tokens, int k, int rows,
            cudaStream_t s) {
  const dim3 grid(tokens, (kVectors + kThreads * kRuns - 1) / (kThreads * kRuns));
  reduce<HINT, GROUP><<<grid, kThreads, 0, s>>>(static_cast<const uint4*>(y), pos, w,
                                                static_cast<uint4*>(out), k, rows);
}

}  // namespace

extern "C" int reduce_gather(int hint, int group, const void* y, const int* pos, const float* w,
                             void* out, int tokens, int k, int rows, void* stream) {
  if (k > kMaxK) return static_cast<int>(cudaErrorInvalidValue);
  auto s = static_cast<cudaStream_t>(stream);
  if (hint == 1 && group == 4) {
    launch<1, 4>(y, pos, w, out, tokens, k, rows, s);
  } else if (hint == 1) {
    launch<1, 2>(y, pos, w, out, tokens, k, rows, s);
  } else if (hint == 2 && group == 4) {
    launch<2, 4>(y, pos, w, out, tokens, k, rows, s);
  } else if (hint == 2) {
    launch<2, 2>(y, pos, w, out, tokens, k, rows, s);
  } else if (group == 8) {
    launch<0, 8>(y, pos, w, out, tokens, k, rows, s);
  } else if (group == 4) {
    launch<0, 4>(y, pos, w, out, tokens, k, rows, s);
  } else {
    launch<0, 2>(y, pos, w, out, tokens, k, rows, s);
  }
  return static_cast<int>(cudaGetLastError());
}
