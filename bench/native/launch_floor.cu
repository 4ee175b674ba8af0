// The host cost of one kernel launch with nothing else around it: the floor under any
// library's per-call overhead on this machine (driver + its virtualisation).
//
//   nvcc -O2 -o launch_floor bench/native/launch_floor.cu -lcuda && ./launch_floor
//
// Prints the median over 25 bursts of 10,000 back-to-back launches of an empty kernel with
// three pointer arguments (the shape of a 3-tensor op), through cuLaunchKernel and through
// cuLaunchKernelEx (what tileaot's runtime calls).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void empty3(const float*, const float*, float*) {}

static void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "%s failed: %d\n", what, static_cast<int>(r));
    std::exit(1);
  }
}

template <class Launch>
static double median_us(Launch launch) {
  constexpr int kCalls = 10000;
  std::vector<double> samples;
  for (int rep = 0; rep < 26; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) launch();
    auto t1 = std::chrono::steady_clock::now();
    cudaDeviceSynchronize();
    if (rep > 0)
      samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kCalls);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

int main() {
  float* buf = nullptr;
  if (cudaMalloc(&buf, 3 * 1024 * sizeof(float)) != cudaSuccess) return 2;
  cudaFunction_t rt_fn;
  cudaGetFuncBySymbol(&rt_fn, reinterpret_cast<const void*>(empty3));
  CUfunction fn = reinterpret_cast<CUfunction>(rt_fn);
  const float *a = buf, *b = buf + 1024;
  float* c = buf + 2048;
  void* args[] = {&a, &b, &c};
  CUstream stream = nullptr;
  double plain = median_us([&] {
    check(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, args, nullptr), "cuLaunchKernel");
  });
  CUlaunchConfig cfg = {};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 32;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = stream;
  double ex =
      median_us([&] { check(cuLaunchKernelEx(&cfg, fn, args, nullptr), "cuLaunchKernelEx"); });
  double rt = median_us([&] { empty3<<<1, 32>>>(a, b, c); });
  std::printf(
      "{\"cuLaunchKernel_us\": %.3f, \"cuLaunchKernelEx_us\": %.3f, \"triple_chevron_us\": %.3f}\n",
      plain, ex, rt);
  return 0;
}
