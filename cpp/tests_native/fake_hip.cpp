// A fake libamdhip64 for testing the HIP loader path (cpp/runtime/hip_driver.cpp) without ROCm
// or an AMD GPU. Code objects are the text lists of registry_fake.cpp ("sm_80: name name");
// a function exists if its name is a word of that list. Kernels are never run: launches are
// recorded in FakeHipState. FAKE_HIP_INIT_FAIL=1 makes hipInit fail.
#include "fake_hip.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace {

FakeHipState g_state;
std::mutex g_mu;

constexpr int kHipErrorInvalidValue = 1;
constexpr int kHipErrorNoDevice = 100;
constexpr int kHipErrorNotFound = 500;

struct Module {
  std::string image;
};
struct Function {
  std::string name;
};

}  // namespace

extern "C" {

FakeHipState* fake_hip_state() { return &g_state; }

int hipInit(unsigned int) {
  ++g_state.init_calls;
  const char* fail = std::getenv("FAKE_HIP_INIT_FAIL");
  return fail && std::strcmp(fail, "1") == 0 ? kHipErrorNoDevice : 0;
}

int hipDriverGetVersion(int* version) {
  *version = 60400000;
  return 0;
}

const char* hipGetErrorName(int error) {
  switch (error) {
    case 0:
      return "hipSuccess";
    case kHipErrorInvalidValue:
      return "hipErrorInvalidValue";
    case kHipErrorNoDevice:
      return "hipErrorNoDevice";
    case kHipErrorNotFound:
      return "hipErrorNotFound";
    case 200:
      return "hipErrorInvalidImage";
    case 801:
      return "hipErrorNotSupported";
    default:
      return "hipErrorUnknown";
  }
}

const char* hipGetErrorString(int error) { return error == 0 ? "no error" : "fake HIP error"; }

int hipGetDeviceCount(int* count) {
  *count = 1;
  return 0;
}

int hipGetDevice(int* device) {
  *device = 0;
  return 0;
}

int hipModuleLoadData(void** module, const void* image) {
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_state.module_loads;
  if (g_state.fail_module_load) return g_state.fail_module_load;
  *module = new Module{static_cast<const char*>(image)};  // never freed, as real modules here
  return 0;
}

int hipModuleGetFunction(void** fn, void* module, const char* name) {
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_state.get_functions;
  const std::string& image = static_cast<Module*>(module)->image;
  if (image.find(std::string(" ") + name) == std::string::npos) return kHipErrorNotFound;
  *fn = new Function{name};
  return 0;
}

int hipModuleLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned smem, void* stream, void** params, void** extra) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state.fail_launch) return g_state.fail_launch;
  if (fn == nullptr || params == nullptr || extra != nullptr) return kHipErrorInvalidValue;
  FakeHipLaunch& l = g_state.launches[g_state.n_launches++ % 64];
  l = {{gx, gy, gz}, {bx, by, bz}, smem, stream, {}, *static_cast<void**>(params[0])};
  std::strncpy(l.kernel, static_cast<Function*>(fn)->name.c_str(), sizeof(l.kernel) - 1);
  return 0;
}

}  // extern "C"
