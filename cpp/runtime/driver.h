// The slice of the CUDA driver API the runtime uses, loaded with dlopen at first need.
//
// We declare the types ourselves instead of including cuda.h so that building tileaot needs no
// CUDA toolkit and the library links nothing from CUDA: `import tileaot` must work on a machine
// without a driver (DESIGN.md "Must hold" 1). Layouts and enum values below were matched against
// cuda.h of CUDA 13.0 (CUDA_VERSION 13000) and 12.9; tests_native/layout_check.cpp
// static_asserts them against the real header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace tileaot::detail {

// Runs `Load` once per process and keeps its result (or its error) for good. Never destroyed:
// launches on other threads may still run while static destructors do at exit.
template <typename T, bool (*Load)(T*, std::string*)>
const T* load_once(std::string* error) {
  struct Loaded {
    T value{};
    bool ok = false;
    std::string error;
  };
  static std::once_flag once;
  static Loaded* loaded = nullptr;
  std::call_once(once, [] {
    loaded = new Loaded();
    loaded->ok = Load(&loaded->value, &loaded->error);
  });
  if (!loaded->ok) {
    *error = loaded->error;
    return nullptr;
  }
  return &loaded->value;
}

}  // namespace tileaot::detail

namespace tileaot::detail {

using CUresult = int;  // enum cudaError_enum; 0 is CUDA_SUCCESS
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;

constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaErrorInvalidValue = 1;
constexpr CUresult kCudaErrorOutOfMemory = 2;
constexpr CUresult kCudaErrorInvalidImage = 200;  // CUDA_ERROR_INVALID_IMAGE
constexpr CUresult kCudaErrorNotFound = 500;

constexpr int kDevAttrComputeCapabilityMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kDevAttrComputeCapabilityMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
constexpr int kFuncAttrMaxDynamicSharedSize = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

// CUlaunchAttributeID values.
constexpr int kLaunchAttrCooperative = 2;       // CU_LAUNCH_ATTRIBUTE_COOPERATIVE
constexpr int kLaunchAttrClusterDimension = 4;  // ..._CLUSTER_DIMENSION
constexpr int kLaunchAttrProgrammaticStreamSerialization =
    6;  // ..._PROGRAMMATIC_STREAM_SERIALIZATION

// CUlaunchAttributeValue: a 64-byte union; we only write the members we use.
union CUlaunchAttributeValue {
  char pad[64];
  int cooperative;
  struct {
    unsigned int x, y, z;
  } clusterDim;
  int programmaticStreamSerializationAllowed;
  void* align_;  // the real union holds pointers (CUevent): 8-byte alignment
};

struct CUlaunchAttribute {
  int id;  // CUlaunchAttributeID
  char pad[8 - sizeof(int)];
  CUlaunchAttributeValue value;
};

struct CUlaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
};

static_assert(sizeof(CUlaunchAttributeValue) == 64, "CUlaunchAttributeValue layout");
static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute layout");
static_assert(offsetof(CUlaunchConfig, hStream) == 32, "CUlaunchConfig layout");
static_assert(sizeof(CUlaunchConfig) == 56, "CUlaunchConfig layout");

// Entry points, typed as in cuda.h (enums passed as int, which is their ABI). Each is the
// version of the symbol that CUDA 12.0 defined (see kDriverApiVersion in driver.cpp).
struct Driver {
  CUresult (*cuInit)(unsigned int flags);
  CUresult (*cuDriverGetVersion)(int* version);
  CUresult (*cuGetErrorName)(CUresult error, const char** str);
  CUresult (*cuGetErrorString)(CUresult error, const char** str);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);
  CUresult (*cuDeviceGetAttribute)(int* value, int attrib, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice device);
  CUresult (*cuCtxGetCurrent)(CUcontext* ctx);
  CUresult (*cuCtxPushCurrent)(CUcontext ctx);  // cuCtxPushCurrent_v2
  CUresult (*cuCtxPopCurrent)(CUcontext* ctx);  // cuCtxPopCurrent_v2
  CUresult (*cuModuleLoadData)(CUmodule* module, const void* image);
  CUresult (*cuModuleGetFunction)(CUfunction* fn, CUmodule module, const char* name);
  CUresult (*cuFuncSetAttribute)(CUfunction fn, int attrib, int value);
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig* config, CUfunction fn, void** params,
                               void** extra);
  CUresult (*cuTensorMapEncodeTiled)(void* map, int dtype, uint32_t rank, void* address,
                                     const uint64_t* dims, const uint64_t* strides,
                                     const uint32_t* box, const uint32_t* elem_strides,
                                     int interleave, int swizzle, int l2_promotion, int oob_fill);
};

// The loaded driver with cuInit(0) done, or nullptr with *error set to a message saying why
// (driver absent, too old, cuInit failed). Thread-safe; the work happens once per process and
// its outcome, success or failure, is kept.
const Driver* get_driver(std::string* error);

// "CUDA_ERROR_INVALID_VALUE: invalid argument" for a driver status.
std::string driver_error_text(const Driver& driver, CUresult status);

}  // namespace tileaot::detail
