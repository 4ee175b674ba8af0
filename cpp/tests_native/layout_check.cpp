// Compile-only check that driver.h's hand-written declarations match the real cuda.h (the
// runtime itself never includes it). Built only where a CUDA toolkit header is available.
#include <cuda.h>

#include <cstddef>
#include <type_traits>

#include "driver.h"
#include "registry.h"

namespace d = tileaot::detail;

static_assert(sizeof(d::CUlaunchAttributeValue) == sizeof(CUlaunchAttributeValue));
static_assert(alignof(d::CUlaunchAttributeValue) == alignof(CUlaunchAttributeValue));
static_assert(sizeof(d::CUlaunchAttribute) == sizeof(CUlaunchAttribute));
static_assert(offsetof(d::CUlaunchAttribute, value) == offsetof(CUlaunchAttribute, value));
static_assert(sizeof(d::CUlaunchConfig) == sizeof(CUlaunchConfig));
static_assert(offsetof(d::CUlaunchConfig, sharedMemBytes) ==
              offsetof(CUlaunchConfig, sharedMemBytes));
static_assert(offsetof(d::CUlaunchConfig, hStream) == offsetof(CUlaunchConfig, hStream));
static_assert(offsetof(d::CUlaunchConfig, attrs) == offsetof(CUlaunchConfig, attrs));
static_assert(offsetof(d::CUlaunchConfig, numAttrs) == offsetof(CUlaunchConfig, numAttrs));

static_assert(d::kLaunchAttrCooperative == CU_LAUNCH_ATTRIBUTE_COOPERATIVE);
static_assert(d::kLaunchAttrClusterDimension == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
static_assert(d::kLaunchAttrProgrammaticStreamSerialization ==
              CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
static_assert(d::kDevAttrComputeCapabilityMajor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(d::kDevAttrComputeCapabilityMinor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
static_assert(d::kFuncAttrMaxDynamicSharedSize == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
static_assert(d::kCudaSuccess == CUDA_SUCCESS && d::kCudaErrorNotFound == CUDA_ERROR_NOT_FOUND &&
              d::kCudaErrorInvalidValue == CUDA_ERROR_INVALID_VALUE);
static_assert(sizeof(CUresult) == sizeof(d::CUresult) && sizeof(CUdevice) == sizeof(d::CUdevice));

// registry.h's TensorMap: same size; the driver requires 64-byte alignment (cuda.h 13 asks
// for 128 in its own struct, 12.x for 64; cuTensorMapEncodeTiled documents 64).
static_assert(sizeof(d::TensorMap) == sizeof(CUtensorMap));
static_assert(alignof(d::TensorMap) >= 64);

// The real signatures driver.h mirrors by hand (its enums become int: same size and ABI).
static_assert(std::is_same_v<decltype(&::cuModuleLoadData), CUresult (*)(CUmodule*, const void*)>);
static_assert(
    std::is_same_v<decltype(&::cuTensorMapEncodeTiled),
                   CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill)>);
static_assert(sizeof(CUtensorMapDataType) == sizeof(int) &&
              sizeof(CUtensorMapSwizzle) == sizeof(int));
static_assert(sizeof(CUfunction_attribute) == sizeof(int) &&
              sizeof(CUdevice_attribute) == sizeof(int));
