#include "device.h"

#include "blob.h"
#include "registry.h"
#include "select.h"

namespace tileaot::detail {
namespace {

bool check(CUresult status, const char* call, DriverFailure* failure) {
  if (status == kCudaSuccess) return true;
  failure->call = call;
  failure->status = status;
  return false;
}

void init_device(const Driver& d, int ordinal, DeviceState* dev) {
  dev->modules.assign(kNumBlobs, nullptr);
  dev->resolved.reset(new std::atomic<const ResolvedVariant*>[kNumVariants]());
  DriverFailure* f = &dev->query_failure;
  if (check(d.cuDeviceGet(&dev->handle, ordinal), "cuDeviceGet", f) &&
      check(d.cuDeviceGetAttribute(&dev->major, kDevAttrComputeCapabilityMajor, dev->handle),
            "cuDeviceGetAttribute", f) &&
      check(d.cuDeviceGetAttribute(&dev->minor, kDevAttrComputeCapabilityMinor, dev->handle),
            "cuDeviceGetAttribute", f)) {
    dev->arch = arch_name(dev->major, dev->minor);
  }
}

bool load_devices(Devices* devices, std::string* error) {
  const Driver* d = get_driver(error);
  if (d == nullptr) return false;
  int count = 0;
  if (CUresult rc = d->cuDeviceGetCount(&count); rc != kCudaSuccess) {
    *error = "tileaot: cuDeviceGetCount failed: " + driver_error_text(*d, rc);
    return false;
  }
  devices->driver = d;
  devices->count = count;
  devices->states.reset(new DeviceState[count]);
  for (int i = 0; i < count; ++i) init_device(*d, i, &devices->states[i]);
  return true;
}

// The image of `blob` for cuModuleLoadData (inflated if compressed). A blob that does not
// inflate fails like a module load the driver refused: a DriverError naming the cubin's arch.
bool open_image(const Blob& blob, BlobImage* image, DriverFailure* failure) {
  std::string why;
  const BlobImage::Status status = image->open(blob, &why);
  if (status == BlobImage::kOk) return true;
  const bool oom = status == BlobImage::kOutOfMemory;
  failure->detail = std::string("cubin compiled for ") + blob.compiled_arch + ": " + why +
                    (oom ? "" : "; the library is damaged: reinstall tileaot");
  return check(oom ? kCudaErrorOutOfMemory : kCudaErrorInvalidImage, "inflating the embedded cubin",
               failure);
}

// The module of `blob` on this device; loads it on first use. Caller holds dev.mu.
bool module_locked(const Driver& d, DeviceState& dev, int32_t blob, CUmodule* module,
                   DriverFailure* failure) {
  if (blob < 0 || blob >= kNumBlobs) {
    failure->detail = "blob index " + std::to_string(blob) + " out of range";
    return check(kCudaErrorInvalidValue, "cuModuleLoadData", failure);
  }
  if (dev.modules[blob] == nullptr) {
    BlobImage image;  // an inflated copy lives until the load returns
    if (!open_image(kBlobs[blob], &image, failure)) return false;
    CUmodule loaded = nullptr;
    if (!check(d.cuModuleLoadData(&loaded, image.data()), "cuModuleLoadData", failure)) {
      failure->detail = std::string("cubin compiled for ") + kBlobs[blob].compiled_arch;
      return false;
    }
    dev.modules[blob] = loaded;
  }
  *module = dev.modules[blob];
  return true;
}

}  // namespace

const Devices* get_devices(std::string* error) { return load_once<Devices, load_devices>(error); }

bool primary_context(const Driver& d, DeviceState& dev, CUcontext* ctx, DriverFailure* failure) {
  *ctx = dev.context.load(std::memory_order_acquire);
  if (*ctx != nullptr) return true;
  std::lock_guard<std::mutex> lock(dev.mu);
  *ctx = dev.context.load(std::memory_order_relaxed);
  if (*ctx != nullptr) return true;
  // Retained once and never released: see device.h.
  if (!check(d.cuDevicePrimaryCtxRetain(ctx, dev.handle), "cuDevicePrimaryCtxRetain", failure)) {
    return false;
  }
  dev.context.store(*ctx, std::memory_order_release);
  return true;
}

ScopedContext::~ScopedContext() {
  CUcontext popped = nullptr;
  if (pushed_) d_.cuCtxPopCurrent(&popped);
}

bool ScopedContext::enter(CUcontext ctx, DriverFailure* failure) {
  CUcontext current = nullptr;
  if (!check(d_.cuCtxGetCurrent(&current), "cuCtxGetCurrent", failure)) return false;
  if (current == ctx) return true;
  pushed_ = check(d_.cuCtxPushCurrent(ctx), "cuCtxPushCurrent", failure);
  return pushed_;
}

const ResolvedVariant* resolve_variant(const Driver& d, DeviceState& dev, int32_t row,
                                       DriverFailure* failure) {
  std::atomic<const ResolvedVariant*>& slot = dev.resolved[row];
  if (const ResolvedVariant* r = slot.load(std::memory_order_acquire)) return r;
  std::lock_guard<std::mutex> lock(dev.mu);
  if (const ResolvedVariant* r = slot.load(std::memory_order_relaxed)) return r;
  const Variant& v = kVariants[row];
  CUmodule module = nullptr;
  if (!module_locked(d, dev, v.blob, &module, failure)) return nullptr;
  auto resolved = std::make_unique<ResolvedVariant>();
  resolved->n_kernels = v.n_kernels;
  resolved->kernels = std::make_unique<KernelSlot[]>(v.n_kernels);
  for (int32_t k = 0; k < v.n_kernels; ++k) {
    if (!check(d.cuModuleGetFunction(&resolved->kernels[k].fn, module, v.kernel_names[k]),
               "cuModuleGetFunction", failure)) {
      failure->detail = std::string("kernel ") + v.kernel_names[k];
      return nullptr;
    }
  }
  // Published once and kept for the process (see device.h).
  slot.store(resolved.get(), std::memory_order_release);
  return resolved.release();
}

bool ensure_smem(const Driver& d, DeviceState& dev, KernelSlot& kernel, uint32_t smem,
                 DriverFailure* failure) {
  if (smem <= kernel.smem_limit.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> lock(dev.mu);
  if (smem <= kernel.smem_limit.load(std::memory_order_relaxed)) return true;
  if (!check(d.cuFuncSetAttribute(kernel.fn, kFuncAttrMaxDynamicSharedSize, static_cast<int>(smem)),
             "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", failure)) {
    failure->detail = std::to_string(smem) + " bytes of dynamic shared memory";
    return false;
  }
  kernel.smem_limit.store(smem, std::memory_order_release);
  return true;
}

}  // namespace tileaot::detail
