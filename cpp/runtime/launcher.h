// The Launcher that generated launch functions call (registry.h): cuLaunchKernelEx with the
// launch attributes TileLang chose, and cuTensorMapEncodeTiled for TMA descriptors.
#pragma once

#include "device.h"
#include "registry.h"

namespace tileaot::detail {

class DriverLauncher final : public Launcher, public FirstFailure {
 public:
  DriverLauncher(const Driver& d, DeviceState& dev, const Variant& variant,
                 const ResolvedVariant& resolved, CUstream stream)
      : d_(d), dev_(dev), variant_(variant), resolved_(resolved), stream_(stream) {}

  int launch(int kernel, const LaunchDims& dims, void** args, uint32_t flags,
             const uint32_t cluster[3]) override;
  int encode_tiled(TensorMap* map, int dtype, uint32_t rank, void* address, const uint64_t* dims,
                   const uint64_t* strides, const uint32_t* box, const uint32_t* elem_strides,
                   int interleave, int swizzle, int l2_promotion, int oob_fill) override;

 private:
  const Driver& d_;
  DeviceState& dev_;
  const Variant& variant_;
  const ResolvedVariant& resolved_;
  CUstream stream_;
};

}  // namespace tileaot::detail
