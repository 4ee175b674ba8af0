#include "launcher.h"

#include <cstdio>
#include <string>

namespace tileaot::detail {
namespace {

std::string dims_text(const char* label, const uint32_t v[3]) {
  return std::string(label) + " (" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ", " +
         std::to_string(v[2]) + ")";
}

std::string hex_text(const void* p) {
  char text[2 + 16 + 1];
  std::snprintf(text, sizeof(text), "0x%llx",
                static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p)));
  return text;
}

template <typename T>
std::string list_text(const T* values, uint32_t n) {
  std::string out = "[";
  for (uint32_t i = 0; i < n; ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

// Fills attrs with what TileLang's launch set; returns how many.
unsigned int launch_attributes(uint32_t flags, const uint32_t cluster[3],
                               CUlaunchAttribute attrs[3]) {
  unsigned int n = 0;
  if (flags & kLaunchPdl) {
    attrs[n].id = kLaunchAttrProgrammaticStreamSerialization;
    attrs[n++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (flags & kLaunchCooperative) {
    attrs[n].id = kLaunchAttrCooperative;
    attrs[n++].value.cooperative = 1;
  }
  if (cluster != nullptr && (cluster[0] != 1 || cluster[1] != 1 || cluster[2] != 1)) {
    attrs[n].id = kLaunchAttrClusterDimension;
    attrs[n++].value.clusterDim = {cluster[0], cluster[1], cluster[2]};
  }
  return n;
}

}  // namespace

int DriverLauncher::launch(int kernel, const LaunchDims& dims, void** args, uint32_t flags,
                           const uint32_t cluster[3]) {
  if (kernel < 0 || kernel >= resolved_.n_kernels) {
    return fail("cuLaunchKernelEx", kCudaErrorInvalidValue,
                "kernel index " + std::to_string(kernel) + " out of range");
  }
  KernelSlot& slot = resolved_.kernels[kernel];
  if (!ensure_smem(d_, dev_, slot, dims.smem, &failure_)) return failure_.status;
  CUlaunchAttribute attrs[3] = {};
  CUlaunchConfig config = {};
  config.gridDimX = dims.grid[0];
  config.gridDimY = dims.grid[1];
  config.gridDimZ = dims.grid[2];
  config.blockDimX = dims.block[0];
  config.blockDimY = dims.block[1];
  config.blockDimZ = dims.block[2];
  config.sharedMemBytes = dims.smem;
  config.hStream = stream_;
  config.attrs = attrs;
  config.numAttrs = launch_attributes(flags, cluster, attrs);
  const CUresult rc = d_.cuLaunchKernelEx(&config, slot.fn, args, nullptr);
  if (rc == kCudaSuccess) return 0;
  return fail("cuLaunchKernelEx", rc,
              std::string("kernel ") + variant_.kernel_names[kernel] + ", " +
                  dims_text("grid", dims.grid) + ", " + dims_text("block", dims.block) + ", smem " +
                  std::to_string(dims.smem));
}

int DriverLauncher::encode_tiled(TensorMap* map, int dtype, uint32_t rank, void* address,
                                 const uint64_t* dims, const uint64_t* strides, const uint32_t* box,
                                 const uint32_t* elem_strides, int interleave, int swizzle,
                                 int l2_promotion, int oob_fill) {
  const CUresult rc =
      d_.cuTensorMapEncodeTiled(map, dtype, rank, address, dims, strides, box, elem_strides,
                                interleave, swizzle, l2_promotion, oob_fill);
  if (rc == kCudaSuccess) return 0;
  // The arguments say why (misaligned address or stride, box too large): show them.
  return fail("cuTensorMapEncodeTiled", rc,
              "dtype " + std::to_string(dtype) + ", rank " + std::to_string(rank) + ", dims " +
                  list_text(dims, rank) + ", strides " +
                  list_text(strides, rank > 0 ? rank - 1 : 0) + ", box " + list_text(box, rank) +
                  ", address " + hex_text(address));
}

}  // namespace tileaot::detail
