// The HIP loader path: the slice of the HIP runtime API that loads a code object and launches
// its kernels, loaded with dlopen at first need, and a Launcher (registry.h) over it, so the
// generated launch functions of a variant run unchanged on AMD GPUs.
//
// Compiled only with -DTILEAOT_HIP=ON (CMakeLists.txt); the CUDA build does not contain it.
// As in driver.h we declare the few types ourselves instead of including hip_runtime_api.h, so
// building needs no ROCm install. Signatures follow the HIP runtime API reference (ROCm 6.x,
// "Module management"). Not yet run on AMD hardware: see docs/HIP.md.
#pragma once

#include <cstdint>
#include <string>

#include "device.h"
#include "registry.h"

namespace tileaot::detail {

using HipError = int;  // hipError_t; 0 is hipSuccess
using HipModule = struct ihipModule_t*;
using HipFunction = struct ihipModuleSymbol_t*;
using HipStream = struct ihipStream_t*;

constexpr HipError kHipSuccess = 0;
constexpr HipError kHipErrorInvalidValue = 1;    // hipErrorInvalidValue
constexpr HipError kHipErrorOutOfMemory = 2;     // hipErrorOutOfMemory
constexpr HipError kHipErrorInvalidImage = 200;  // hipErrorInvalidImage
constexpr HipError kHipErrorNotSupported = 801;  // hipErrorNotSupported

struct HipDriver {
  HipError (*hipInit)(unsigned int flags);
  HipError (*hipDriverGetVersion)(int* version);
  const char* (*hipGetErrorName)(HipError error);
  const char* (*hipGetErrorString)(HipError error);
  HipError (*hipGetDeviceCount)(int* count);
  HipError (*hipGetDevice)(int* device);
  HipError (*hipModuleLoadData)(HipModule* module, const void* image);
  HipError (*hipModuleGetFunction)(HipFunction* fn, HipModule module, const char* name);
  HipError (*hipModuleLaunchKernel)(HipFunction fn, unsigned int grid_x, unsigned int grid_y,
                                    unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                    unsigned int block_z, unsigned int shared_mem_bytes,
                                    HipStream stream, void** kernel_params, void** extra);
};

// The loaded HIP runtime with hipInit(0) done, or nullptr with *error saying why. Tries
// $TILEAOT_HIP_LIBRARY if set, then libamdhip64.so.7, .so.6 and .so. Thread-safe; the work
// happens once per process and its outcome is kept.
const HipDriver* get_hip_driver(std::string* error);

// "hipErrorInvalidValue: invalid argument" for a HIP status.
std::string hip_error_text(const HipDriver& hip, HipError status);

// The kernels of one variant, loaded from its code object on one device.
struct HipKernels {
  HipModule module = nullptr;
  HipFunction fns[8] = {};
  int32_t n = 0;
};

// Loads (once per device and blob, under a lock; never unloaded, as the CUDA path) the code
// object of kVariants[row] on the current HIP device and looks up its kernels.
const HipKernels* hip_resolve_variant(const HipDriver& hip, int32_t row, DriverFailure* failure);

// Runs the generated launch function of kVariants[row] through HIP on `stream` (the current
// device's). On failure returns TILEAOT_ERROR_DRIVER with *error naming op, variant and call.
int hip_launch_row(const HipDriver& hip, int32_t row, HipStream stream, const CallArgs& args,
                   std::string* error);

// hipModuleLaunchKernel with the geometry the generated code computed. PDL is dropped (it only
// allows overlap); cooperative and cluster launches and TMA descriptors are NVIDIA-only here:
// TileLang's HIP lowering never asks for them, and a row that does fails with
// hipErrorNotSupported instead of launching wrongly.
class HipLauncher final : public Launcher, public FirstFailure {
 public:
  HipLauncher(const HipDriver& hip, const Variant& variant, const HipKernels& kernels,
              HipStream stream)
      : hip_(hip), variant_(variant), kernels_(kernels), stream_(stream) {}

  int launch(int kernel, const LaunchDims& dims, void** args, uint32_t flags,
             const uint32_t cluster[3]) override;
  int encode_tiled(TensorMap* map, int dtype, uint32_t rank, void* address, const uint64_t* dims,
                   const uint64_t* strides, const uint32_t* box, const uint32_t* elem_strides,
                   int interleave, int swizzle, int l2_promotion, int oob_fill) override;

 private:
  const HipDriver& hip_;
  const Variant& variant_;
  const HipKernels& kernels_;
  HipStream stream_;
};

}  // namespace tileaot::detail
