// Per-device state: compute capability, primary context, loaded modules and the resolved
// kernels of each variant.
//
// Caching and locking: everything per device lives in one DeviceState. Its mutex guards the
// slow paths only (retaining the primary context, cuModuleLoadData, cuModuleGetFunction,
// raising a kernel's shared-memory limit). The hot path reads two atomics: the context and
// the per-row ResolvedVariant slot, published with release/acquire once resolved. Modules are
// keyed by (device, blob); since the runtime only ever uses a device's primary context this is
// the same as keying by (context, blob). Nothing is ever unloaded or released: contexts and
// modules live for the process, because at static-destruction time the driver may already be
// torn down, and launches on other threads may still hold them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "driver.h"

namespace tileaot::detail {

// Which driver call failed, with its status and optional detail for the message.
struct DriverFailure {
  const char* call = nullptr;
  CUresult status = kCudaSuccess;
  std::string detail;
};

// Keeps the first failing driver call of one launch: the CUDA and HIP launchers derive from it.
class FirstFailure {
 public:
  // The first driver call that failed during this launch (call == nullptr if none).
  const DriverFailure& failure() const { return failure_; }

 protected:
  // Keeps (call, status, detail) unless a failure is kept already; returns `status`.
  int fail(const char* call, int status, std::string detail) {
    if (failure_.call == nullptr) failure_ = {call, status, std::move(detail)};
    return status;
  }

  DriverFailure failure_;
};

struct KernelSlot {
  CUfunction fn = nullptr;
  // Dynamic shared memory the function may use without (further) opt-in. 48 KiB is the
  // driver's default; above it we set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES once
  // (again only if a later call asks for even more).
  std::atomic<uint32_t> smem_limit{48 * 1024};
};

// A variant's kernels, resolved in one device's primary context.
struct ResolvedVariant {
  std::unique_ptr<KernelSlot[]> kernels;
  int32_t n_kernels = 0;
};

struct DeviceState {
  CUdevice handle = 0;
  int major = 0;
  int minor = 0;
  std::string arch;             // "sm_90a", see arch_name()
  DriverFailure query_failure;  // set if reading the compute capability failed

  std::mutex mu;  // slow paths only, see above
  std::atomic<CUcontext> context{nullptr};
  std::vector<CUmodule> modules;                                    // by blob index; under mu
  std::unique_ptr<std::atomic<const ResolvedVariant*>[]> resolved;  // by table row
};

struct Devices {
  const Driver* driver = nullptr;
  int count = 0;
  std::unique_ptr<DeviceState[]> states;
};

// The driver and one DeviceState per visible device, set up once (compute capabilities read
// then); nullptr with *error set when there is no usable driver.
const Devices* get_devices(std::string* error);

// The device's primary context, retained on first use.
bool primary_context(const Driver& d, DeviceState& dev, CUcontext* ctx, DriverFailure* failure);

// Makes a context current for a scope, pushing only if another one is current (pushing costs
// more than checking, and most callers, e.g. torch, already have the primary context current).
class ScopedContext {
 public:
  explicit ScopedContext(const Driver& d) : d_(d) {}
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

  bool enter(CUcontext ctx, DriverFailure* failure);

 private:
  const Driver& d_;
  bool pushed_ = false;
};

// The kernels of table row `row` on this device: on first use loads the row's blob (once per
// device) and looks its kernels up. Call with the device's primary context current.
const ResolvedVariant* resolve_variant(const Driver& d, DeviceState& dev, int32_t row,
                                       DriverFailure* failure);

// Lets `kernel` use `smem` bytes of dynamic shared memory (no-op up to its current limit).
bool ensure_smem(const Driver& d, DeviceState& dev, KernelSlot& kernel, uint32_t smem,
                 DriverFailure* failure);

}  // namespace tileaot::detail
