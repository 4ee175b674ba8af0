#include "driver.h"

#include <dlfcn.h>

#include <mutex>

namespace tileaot::detail {
namespace {

// We ask cuGetProcAddress for each entry point as CUDA 12.0 defined it: those are the
// signatures declared in driver.h, and 12.0 is the first driver with cuLaunchKernelEx and
// cuTensorMapEncodeTiled, so it is also our minimum.
constexpr int kDriverApiVersion = 12000;
// CU_GET_PROC_ADDRESS_LEGACY_STREAM: stream 0 means the legacy default stream, as it does for
// torch and for code built without --default-stream per-thread.
constexpr uint64_t kProcAddressLegacyStream = 1;

using GetProcAddressFn = CUresult (*)(const char* symbol, void** fn, int version, uint64_t flags,
                                      int* status);

// Finds entry points: through cuGetProcAddress_v2 where the driver has it (it picks the
// version of a symbol that matches our declarations), else by its exported name.
class SymbolResolver {
 public:
  explicit SymbolResolver(void* lib)
      : lib_(lib),
        get_proc_(reinterpret_cast<GetProcAddressFn>(dlsym(lib, "cuGetProcAddress_v2"))) {}

  // `base` is the name cuGetProcAddress knows; `exported` the versioned export ("_v2").
  template <typename Fn>
  bool bind(Fn*& slot, const char* base, const char* exported) {
    void* fn = nullptr;
    int status = 0;
    if (get_proc_ == nullptr ||
        get_proc_(base, &fn, kDriverApiVersion, kProcAddressLegacyStream, &status) != 0) {
      fn = nullptr;
    }
    if (fn == nullptr) fn = dlsym(lib_, exported);
    slot = reinterpret_cast<Fn*>(fn);
    if (fn == nullptr && missing_ == nullptr) missing_ = exported;
    return fn != nullptr;
  }

  const char* missing() const { return missing_; }

 private:
  void* lib_;
  GetProcAddressFn get_proc_;
  const char* missing_ = nullptr;
};

// The functions needed to call cuInit and explain its failure: exported unversioned by every
// driver, so plain dlsym.
bool bind_bootstrap(void* lib, Driver* d) {
  d->cuInit = reinterpret_cast<decltype(d->cuInit)>(dlsym(lib, "cuInit"));
  d->cuDriverGetVersion =
      reinterpret_cast<decltype(d->cuDriverGetVersion)>(dlsym(lib, "cuDriverGetVersion"));
  d->cuGetErrorName = reinterpret_cast<decltype(d->cuGetErrorName)>(dlsym(lib, "cuGetErrorName"));
  d->cuGetErrorString =
      reinterpret_cast<decltype(d->cuGetErrorString)>(dlsym(lib, "cuGetErrorString"));
  return d->cuInit && d->cuDriverGetVersion && d->cuGetErrorName && d->cuGetErrorString;
}

const char* bind_entry_points(void* lib, Driver* d) {
  SymbolResolver r(lib);
  r.bind(d->cuDeviceGetCount, "cuDeviceGetCount", "cuDeviceGetCount");
  r.bind(d->cuDeviceGet, "cuDeviceGet", "cuDeviceGet");
  r.bind(d->cuDeviceGetAttribute, "cuDeviceGetAttribute", "cuDeviceGetAttribute");
  r.bind(d->cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain");
  r.bind(d->cuCtxGetCurrent, "cuCtxGetCurrent", "cuCtxGetCurrent");
  r.bind(d->cuCtxPushCurrent, "cuCtxPushCurrent", "cuCtxPushCurrent_v2");
  r.bind(d->cuCtxPopCurrent, "cuCtxPopCurrent", "cuCtxPopCurrent_v2");
  r.bind(d->cuModuleLoadData, "cuModuleLoadData", "cuModuleLoadData");
  r.bind(d->cuModuleGetFunction, "cuModuleGetFunction", "cuModuleGetFunction");
  r.bind(d->cuFuncSetAttribute, "cuFuncSetAttribute", "cuFuncSetAttribute");
  r.bind(d->cuLaunchKernelEx, "cuLaunchKernelEx", "cuLaunchKernelEx");
  r.bind(d->cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled", "cuTensorMapEncodeTiled");
  return r.missing();
}

std::string version_text(const Driver& d) {
  int v = 0;
  if (d.cuDriverGetVersion(&v) != kCudaSuccess) return "unknown";
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// Loads and initialises the driver; on failure returns false with *error set.
bool load_driver(Driver* d, std::string* error) {
  // RTLD_LOCAL: keep the driver's symbols out of the global namespace of the process.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    *error =
        "tileaot: CUDA driver (libcuda.so.1) not found: tileaot needs an NVIDIA driver to launch "
        "kernels; import and introspection work without one";
    if (why != nullptr) *error += std::string(" (dlopen: ") + why + ")";
    return false;
  }
  // The library stays loaded for the life of the process: modules and contexts live in it.
  if (!bind_bootstrap(lib, d)) {
    *error = "tileaot: libcuda.so.1 lacks cuInit/cuGetErrorName: not a usable NVIDIA driver";
    return false;
  }
  if (CUresult rc = d->cuInit(0); rc != kCudaSuccess) {
    *error = "tileaot: cuInit failed: " + driver_error_text(*d, rc) +
             " (is an NVIDIA GPU visible? check nvidia-smi and CUDA_VISIBLE_DEVICES)";
    return false;
  }
  if (const char* missing = bind_entry_points(lib, d)) {
    *error = std::string("tileaot: the CUDA driver is too old: it lacks ") + missing +
             " (driver supports CUDA " + version_text(*d) + "; tileaot needs 12.0 or newer)";
    return false;
  }
  return true;
}

}  // namespace

const Driver* get_driver(std::string* error) { return load_once<Driver, load_driver>(error); }

std::string driver_error_text(const Driver& driver, CUresult status) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver.cuGetErrorName(status, &name) != kCudaSuccess || name == nullptr) {
    return "CUDA error " + std::to_string(status);
  }
  if (driver.cuGetErrorString(status, &text) != kCudaSuccess || text == nullptr) return name;
  return std::string(name) + ": " + text;
}

}  // namespace tileaot::detail
