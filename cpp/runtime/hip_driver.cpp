#include "hip_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "blob.h"
#include "tileaot/tileaot.h"

namespace tileaot::detail {
namespace {

// libamdhip64's soname carries the ROCm major (ROCm 6: .so.6, ROCm 7: .so.7); the bare name
// exists only where the development package is installed.
constexpr const char* kHipLibraries[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so"};

template <typename Fn>
bool bind(void* lib, Fn*& slot, const char* name, const char** missing) {
  slot = reinterpret_cast<Fn*>(dlsym(lib, name));
  if (slot == nullptr && *missing == nullptr) *missing = name;
  return slot != nullptr;
}

const char* bind_all(void* lib, HipDriver* h) {
  const char* missing = nullptr;
  bind(lib, h->hipInit, "hipInit", &missing);
  bind(lib, h->hipDriverGetVersion, "hipDriverGetVersion", &missing);
  bind(lib, h->hipGetErrorName, "hipGetErrorName", &missing);
  bind(lib, h->hipGetErrorString, "hipGetErrorString", &missing);
  bind(lib, h->hipGetDeviceCount, "hipGetDeviceCount", &missing);
  bind(lib, h->hipGetDevice, "hipGetDevice", &missing);
  bind(lib, h->hipModuleLoadData, "hipModuleLoadData", &missing);
  bind(lib, h->hipModuleGetFunction, "hipModuleGetFunction", &missing);
  bind(lib, h->hipModuleLaunchKernel, "hipModuleLaunchKernel", &missing);
  return missing;
}

void* open_library(std::string* tried) {
  // An explicit path first: tests point it at a fake, users at a ROCm outside the search path.
  if (const char* path = std::getenv("TILEAOT_HIP_LIBRARY"); path != nullptr && *path) {
    *tried = path;
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  for (const char* name : kHipLibraries) {
    *tried += (tried->empty() ? "" : ", ") + std::string(name);
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return lib;
  }
  return nullptr;
}

bool load_hip(HipDriver* h, std::string* error) {
  std::string tried;
  void* lib = open_library(&tried);
  if (lib == nullptr) {
    *error = "tileaot: HIP runtime not found (tried " + tried +
             "): AMD GPUs need ROCm's libamdhip64; set TILEAOT_HIP_LIBRARY to its path";
    return false;
  }
  if (const char* missing = bind_all(lib, h)) {
    *error = "tileaot: " + tried + " lacks " + missing + ": not a usable HIP runtime";
    return false;
  }
  if (HipError rc = h->hipInit(0); rc != kHipSuccess) {
    *error = "tileaot: hipInit failed: " + hip_error_text(*h, rc) +
             " (is an AMD GPU visible? check rocm-smi and HIP_VISIBLE_DEVICES)";
    return false;
  }
  return true;
}

bool check(HipError rc, const char* call, DriverFailure* failure, std::string detail = {}) {
  if (rc == kHipSuccess) return true;
  *failure = {call, rc, std::move(detail)};
  return false;
}

// Resolved kernels by (device, table row). Guarded by a mutex on every call: this path has not
// met hardware yet, so it stays simple; the CUDA path's lock-free fast path can follow.
std::mutex g_mu;
std::map<std::pair<int, int32_t>, std::unique_ptr<HipKernels>>* g_resolved = nullptr;

}  // namespace

const HipDriver* get_hip_driver(std::string* error) {
  return load_once<HipDriver, load_hip>(error);
}

std::string hip_error_text(const HipDriver& hip, HipError status) {
  const char* name = hip.hipGetErrorName(status);
  const char* text = hip.hipGetErrorString(status);
  std::string out = name ? name : "HIP error " + std::to_string(status);
  return text ? out + ": " + text : out;
}

const HipKernels* hip_resolve_variant(const HipDriver& hip, int32_t row, DriverFailure* failure) {
  const Variant& v = kVariants[row];
  int device = 0;
  if (!check(hip.hipGetDevice(&device), "hipGetDevice", failure)) return nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_resolved == nullptr)
    g_resolved = new std::map<std::pair<int, int32_t>, std::unique_ptr<HipKernels>>();
  auto& slot = (*g_resolved)[{device, row}];
  if (slot) return slot.get();
  auto kernels = std::make_unique<HipKernels>();
  if (v.n_kernels > static_cast<int32_t>(sizeof(kernels->fns) / sizeof(kernels->fns[0]))) {
    *failure = {"hipModuleGetFunction", kHipErrorInvalidValue, "too many kernels in one variant"};
    return nullptr;
  }
  const Blob& blob = kBlobs[v.blob];
  const std::string compiled_for = std::string("code object compiled for ") + blob.compiled_arch;
  BlobImage image;  // inflated if compressed; freed once the module is loaded
  std::string why;
  if (const BlobImage::Status status = image.open(blob, &why); status != BlobImage::kOk) {
    const bool oom = status == BlobImage::kOutOfMemory;
    check(oom ? kHipErrorOutOfMemory : kHipErrorInvalidImage, "inflating the embedded code object",
          failure,
          compiled_for + ": " + why + (oom ? "" : "; the library is damaged: reinstall tileaot"));
    return nullptr;
  }
  if (!check(hip.hipModuleLoadData(&kernels->module, image.data()), "hipModuleLoadData", failure,
             compiled_for)) {
    return nullptr;
  }
  for (int32_t k = 0; k < v.n_kernels; ++k) {
    if (!check(hip.hipModuleGetFunction(&kernels->fns[k], kernels->module, v.kernel_names[k]),
               "hipModuleGetFunction", failure, std::string("kernel ") + v.kernel_names[k])) {
      return nullptr;  // the module stays loaded: modules are never unloaded (see header)
    }
  }
  kernels->n = v.n_kernels;
  slot = std::move(kernels);
  return slot.get();
}

int hip_launch_row(const HipDriver& hip, int32_t row, HipStream stream, const CallArgs& args,
                   std::string* error) {
  const Variant& v = kVariants[row];
  DriverFailure failure;
  if (const HipKernels* kernels = hip_resolve_variant(hip, row, &failure)) {
    HipLauncher launcher(hip, v, *kernels, stream);
    const int rc = v.launch(launcher, args);
    if (rc == 0) return TILEAOT_OK;
    failure = launcher.failure();
    if (failure.call == nullptr) failure = {"the generated launch function", rc, ""};
  }
  *error = std::string("tileaot: ") + v.op + " variant " + v.name + " (" + v.arch +
           "): " + failure.call + " failed: " + hip_error_text(hip, failure.status);
  if (!failure.detail.empty()) *error += " (" + failure.detail + ")";
  return TILEAOT_ERROR_DRIVER;
}

int HipLauncher::launch(int kernel, const LaunchDims& dims, void** args, uint32_t flags,
                        const uint32_t cluster[3]) {
  if (kernel < 0 || kernel >= kernels_.n) {
    return fail("hipModuleLaunchKernel", kHipErrorInvalidValue,
                "kernel index " + std::to_string(kernel) + " out of range");
  }
  // PDL only lets a kernel start before its predecessor ends: dropping it keeps the result.
  // Cooperative and cluster launches change what the kernel may assume: refuse them.
  const bool clustered =
      cluster != nullptr && (cluster[0] != 1 || cluster[1] != 1 || cluster[2] != 1);
  if ((flags & kLaunchCooperative) != 0 || clustered) {
    return fail("hipModuleLaunchKernel", kHipErrorNotSupported,
                std::string("kernel ") + variant_.kernel_names[kernel] +
                    " asks for a cooperative or cluster launch, which tileaot does only on CUDA");
  }
  const HipError rc = hip_.hipModuleLaunchKernel(kernels_.fns[kernel], dims.grid[0], dims.grid[1],
                                                 dims.grid[2], dims.block[0], dims.block[1],
                                                 dims.block[2], dims.smem, stream_, args, nullptr);
  if (rc == kHipSuccess) return 0;
  return fail("hipModuleLaunchKernel", rc,
              std::string("kernel ") + variant_.kernel_names[kernel] + ", smem " +
                  std::to_string(dims.smem));
}

int HipLauncher::encode_tiled(TensorMap*, int, uint32_t, void*, const uint64_t*, const uint64_t*,
                              const uint32_t*, const uint32_t*, int, int, int, int) {
  return fail("cuTensorMapEncodeTiled", kHipErrorNotSupported,
              "TMA descriptors are NVIDIA-only; a HIP variant must not use them");
}

}  // namespace tileaot::detail
