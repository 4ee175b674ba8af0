// Native tests of the HIP loader path (cpp/runtime/hip_driver.cpp) against registry_fake.cpp
// and a fake libamdhip64 (fake_hip.cpp). One process per situation, as loading happens once:
//   TILEAOT_HIP_LIBRARY=/nonexistent test_hip_runtime nohip
//   TILEAOT_HIP_LIBRARY=<fake>       test_hip_runtime fake
//   same with FAKE_HIP_INIT_FAIL=1   test_hip_runtime init-fail
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fake_hip.h"
#include "hip_driver.h"
#include "tileaot/tileaot.h"

namespace tileaot::detail {  // registry_fake.cpp's compressed blob 2
extern unsigned char kFakeZlibBlob[];
extern const size_t kFakeZlibBlobSize;
}  // namespace tileaot::detail

namespace {

using namespace tileaot::detail;

int g_failures = 0;

void expect(bool ok, const char* what, int line, const std::string& detail) {
  if (ok) return;
  ++g_failures;
  std::printf("FAIL line %d: %s\n%s\n", line, what, detail.c_str());
}
#define EXPECT(cond, detail) expect((cond), #cond, __LINE__, (detail))

bool contains(const std::string& haystack, const char* needle) {
  return haystack.find(needle) != std::string::npos;
}

int32_t row_of(const char* name, const char* arch) {
  for (int32_t i = 0; i < kNumVariants; ++i) {
    if (std::strcmp(kVariants[i].name, name) == 0 && std::strcmp(kVariants[i].arch, arch) == 0) {
      return i;
    }
  }
  std::printf("FAIL: no row %s@%s in registry_fake.cpp\n", name, arch);
  std::exit(1);
}

void test_missing_library() {
  std::string error;
  EXPECT(get_hip_driver(&error) == nullptr, error);
  EXPECT(contains(error, "HIP runtime not found") && contains(error, "/nonexistent"), error);
}

void test_init_failure() {
  std::string error;
  EXPECT(get_hip_driver(&error) == nullptr, error);
  EXPECT(contains(error, "hipInit failed: hipErrorNoDevice"), error);
}

FakeHipState* fake_state() {
  void* lib = dlopen(std::getenv("TILEAOT_HIP_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
  auto get = reinterpret_cast<FakeHipState* (*)()>(lib ? dlsym(lib, "fake_hip_state") : nullptr);
  if (get == nullptr) {
    std::printf("FAIL: the fake libamdhip64 is not loaded\n");
    std::exit(1);
  }
  return get();
}

void test_launches(const HipDriver& hip) {
  FakeHipState* state = fake_state();
  void* ptrs[3] = {reinterpret_cast<void*>(0x1000), reinterpret_cast<void*>(0x2000),
                   reinterpret_cast<void*>(0x3000)};
  const int64_t dyn[1] = {77};
  const double scalars[1] = {1e-6};
  const CallArgs args{ptrs, dyn, scalars};
  auto* stream = reinterpret_cast<HipStream>(0x5150);
  const int32_t row = row_of("rms_norm_bf16_n4096", "sm_80");
  std::string error;
  for (int i = 0; i < 2; ++i) {  // the second launch reuses the loaded module
    EXPECT(hip_launch_row(hip, row, stream, args, &error) == TILEAOT_OK, error);
  }
  EXPECT(state->module_loads == 1 && state->get_functions == 1, "module cached per row");
  EXPECT(state->n_launches == 2, "two launches");
  const FakeHipLaunch& l = state->launches[1];
  EXPECT(l.grid[0] == 77 && l.grid[1] == 1 && l.block[0] == 128 && l.smem == 0, "geometry");
  EXPECT(l.stream == stream && l.arg0 == ptrs[0], "stream and first argument");
  EXPECT(std::strcmp(l.kernel, "rms_norm_bf16_n4096_kernel") == 0, l.kernel);

  // TMA, cooperative and cluster launches are refused with a message, never launched.
  const int64_t gemm_dyn[3] = {256, 256, 256};
  const CallArgs gemm_args{ptrs, gemm_dyn, nullptr};
  EXPECT(hip_launch_row(hip, row_of("gemm_bf16_any", "sm_90a"), stream, gemm_args, &error) ==
             TILEAOT_ERROR_DRIVER,
         error);
  EXPECT(contains(error, "cuTensorMapEncodeTiled failed: hipErrorNotSupported") &&
             contains(error, "NVIDIA-only"),
         error);
  EXPECT(state->n_launches == 2, "nothing launched for the TMA row");

  state->fail_launch = 1;
  EXPECT(hip_launch_row(hip, row, stream, args, &error) == TILEAOT_ERROR_DRIVER, error);
  EXPECT(contains(error,
                  "rms_norm variant rms_norm_bf16_n4096 (sm_80): hipModuleLaunchKernel "
                  "failed: hipErrorInvalidValue") &&
             contains(error, "kernel rms_norm_bf16_n4096_kernel"),
         error);
  state->fail_launch = 0;

  state->fail_module_load = 500;  // a row whose code object is not loaded yet
  EXPECT(hip_launch_row(hip, row_of("rms_norm_fp16_any", "sm_80"), stream, args, &error) ==
             TILEAOT_ERROR_DRIVER,
         error);
  EXPECT(contains(error, "hipModuleLoadData failed: hipErrorNotFound") &&
             contains(error, "code object compiled for sm_80"),
         error);
  state->fail_module_load = 0;

  // Blob 2 is stored zlib-compressed: damaged, it fails before any load; intact, the fake finds
  // the kernel in the inflated code object.
  const int32_t compressed = row_of("rms_norm_bf16_any", "sm_90a");
  const int64_t any_dyn[2] = {77, 1024};
  const CallArgs any_args{ptrs, any_dyn, scalars};
  const int loads = state->module_loads;
  kFakeZlibBlob[kFakeZlibBlobSize / 2] ^= 0x5a;
  EXPECT(hip_launch_row(hip, compressed, stream, any_args, &error) == TILEAOT_ERROR_DRIVER, error);
  kFakeZlibBlob[kFakeZlibBlobSize / 2] ^= 0x5a;
  EXPECT(
      contains(error, "inflating the embedded code object failed: hipErrorInvalidImage") &&
          contains(error, "(code object compiled for sm_90a: its zlib stream does not inflate") &&
          contains(error, "reinstall tileaot"),
      error);
  EXPECT(state->module_loads == loads, "no load of a damaged blob");
  EXPECT(hip_launch_row(hip, compressed, stream, any_args, &error) == TILEAOT_OK, error);
  EXPECT(state->module_loads == loads + 1, "loaded once intact");
  const FakeHipLaunch& last = state->launches[(state->n_launches - 1) % 64];
  EXPECT(std::strcmp(last.kernel, "rms_norm_bf16_any_kernel") == 0, last.kernel);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "nohip") {
    test_missing_library();
  } else if (mode == "init-fail") {
    test_init_failure();
  } else if (mode == "fake") {
    std::string error;
    const HipDriver* hip = get_hip_driver(&error);
    EXPECT(hip != nullptr, error);
    if (hip != nullptr) test_launches(*hip);
  } else {
    std::printf("usage: test_hip_runtime nohip|fake|init-fail\n");
    return 2;
  }
  std::printf("%s: %d failures\n", mode.c_str(), g_failures);
  return g_failures == 0 ? 0 : 1;
}
