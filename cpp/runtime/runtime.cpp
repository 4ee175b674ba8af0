// The C ABI (include/tileaot/tileaot.h): validate, select, launch; every failure leaves a
// message in a thread-local string.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "device.h"
#include "launcher.h"
#include "registry.h"
#include "select.h"
#include "tileaot/tileaot.h"

namespace tileaot::detail {
namespace {

thread_local std::string t_last_error;
thread_local int t_last_status = TILEAOT_OK;

int fail(int status, std::string message) {
  t_last_error = std::move(message);
  t_last_status = status;
  return status;
}

// select_for_arch with its message going straight to this thread's error.
int select_row(int32_t handle, int32_t device, const DeviceState& dev, const int64_t* shapes,
               int32_t n_shapes, int64_t* dyn, int32_t* row) {
  const int rc = select_for_arch(handle, dev.major, dev.minor, shapes, n_shapes, dyn, row,
                                 &t_last_error, device);
  if (rc != TILEAOT_OK) t_last_status = rc;
  return rc;
}

std::string op_label(const Variant& v) { return std::string(v.op) + "[" + v.key + "]"; }

std::atomic<int> g_ptx_warnings{0};

// The first launch of an op+key's PTX in this process says so on stderr (ptx_warning).
void warn_ptx_once(const Variant& v, int32_t device, const DeviceState& dev) {
  if (v.arch_kind != kArchPtx) return;
  static std::mutex mu;
  static std::set<std::string> warned;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!warned.insert(op_label(v)).second) return;
  }
  g_ptx_warnings.fetch_add(1);
  std::fprintf(stderr, "%s\n", ptx_warning(v, device, dev.arch).c_str());
}

std::string count_error(const Variant& v, const char* what, int32_t want, int32_t got) {
  return "tileaot: " + op_label(v) + " takes " + std::to_string(want) + " " + what + " (" +
         v.signature + "), got " + std::to_string(got);
}

// Checks a launch's argument counts and pointers against the op+key's first row (all rows of
// an op+key share their parameters).
int check_launch_args(const Variant& v, const void* const* ptrs, int32_t n_tensors,
                      int32_t n_shapes, const double* scalars, int32_t n_scalars) {
  if (n_tensors != v.n_tensors) {
    return fail(TILEAOT_ERROR_INVALID, count_error(v, "tensors", v.n_tensors, n_tensors));
  }
  if (n_shapes != shape_count(v)) {
    return fail(
        TILEAOT_ERROR_INVALID,
        count_error(v, "shape values (all tensor dims, concatenated)", shape_count(v), n_shapes));
  }
  if (n_scalars != v.n_scalars) {
    return fail(TILEAOT_ERROR_INVALID, count_error(v, "scalars", v.n_scalars, n_scalars));
  }
  if ((n_tensors > 0 && ptrs == nullptr) || (n_scalars > 0 && scalars == nullptr)) {
    return fail(TILEAOT_ERROR_INVALID, "tileaot: " + op_label(v) + ": NULL ptrs/scalars array");
  }
  for (int32_t t = 0; t < n_tensors; ++t) {
    if (ptrs[t] == nullptr) {
      return fail(TILEAOT_ERROR_INVALID, "tileaot: " + op_label(v) + ": tensor " +
                                             std::to_string(t) + " has a NULL data pointer");
    }
  }
  return TILEAOT_OK;
}

// The driver and the state of `device`, or an error status (driver missing, no such device,
// compute capability unreadable).
int get_device(int32_t device, const Driver** driver, DeviceState** state) {
  std::string error;
  const Devices* devices = get_devices(&error);
  if (devices == nullptr) return fail(TILEAOT_ERROR_DRIVER, std::move(error));
  if (device < 0 || device >= devices->count) {
    return fail(TILEAOT_ERROR_INVALID, "tileaot: no CUDA device " + std::to_string(device) + " (" +
                                           std::to_string(devices->count) +
                                           " visible; see CUDA_VISIBLE_DEVICES)");
  }
  DeviceState& dev = devices->states[device];
  if (dev.query_failure.call != nullptr) {
    return fail(TILEAOT_ERROR_DRIVER,
                "tileaot: device " + std::to_string(device) + ": " + dev.query_failure.call +
                    " failed: " + driver_error_text(*devices->driver, dev.query_failure.status));
  }
  *driver = devices->driver;
  *state = &dev;
  return TILEAOT_OK;
}

// "tileaot: rms_norm variant rms_norm_bf16_any (sm_80) on device 0 (sm_89): cuLaunchKernelEx
// failed: CUDA_ERROR_...: <string> (detail)".
std::string failure_message(const Driver& d, const Variant& v, int32_t device,
                            const DeviceState& dev, const DriverFailure& f) {
  std::string msg = std::string("tileaot: ") + v.op + " variant " + v.name + " (" + v.arch +
                    ") on device " + std::to_string(device) + " (" + dev.arch + "): " + f.call +
                    " failed: " + driver_error_text(d, f.status);
  return f.detail.empty() ? msg : msg + " (" + f.detail + ")";
}

int launch_row(const Driver& d, DeviceState& dev, int32_t device, int32_t row, void* stream,
               const void* const* ptrs, const int64_t* dyn, const double* scalars) {
  const Variant& v = kVariants[row];
  DriverFailure failure;
  CUcontext ctx = nullptr;
  ScopedContext scope(d);
  const ResolvedVariant* resolved = nullptr;
  if (primary_context(d, dev, &ctx, &failure) && scope.enter(ctx, &failure) &&
      (resolved = resolve_variant(d, dev, row, &failure)) != nullptr) {
    DriverLauncher launcher(d, dev, v, *resolved, static_cast<CUstream>(stream));
    const CallArgs args{const_cast<void* const*>(ptrs), dyn, scalars};
    warn_ptx_once(v, device, dev);
    const int rc = v.launch(launcher, args);
    if (rc == 0) return TILEAOT_OK;
    failure = launcher.failure();
    if (failure.call == nullptr) failure = {"the generated launch function", rc, ""};
  }
  return fail(TILEAOT_ERROR_DRIVER, failure_message(d, v, device, dev, failure));
}

// The first row of handle's (op, key) group (all rows share its parameters); nullptr, with the
// error set, if `handle` is not one `tileaot_lookup` returns.
const Variant* group_head(int32_t handle) {
  Group group;
  if (group_of(handle, &group)) return &kVariants[group.begin];
  fail(TILEAOT_ERROR_INVALID,
       "tileaot: invalid handle " + std::to_string(handle) + " (use tileaot_lookup)");
  return nullptr;
}

const char* variant_field(const Variant& v, const char* field) {
  if (std::strcmp(field, "name") == 0) return v.name;
  if (std::strcmp(field, "op") == 0) return v.op;
  if (std::strcmp(field, "key") == 0) return v.key;
  if (std::strcmp(field, "spec") == 0) return v.spec;
  if (std::strcmp(field, "arch") == 0) return v.arch;
  if (std::strcmp(field, "signature") == 0) return v.signature;
  if (std::strcmp(field, "blob_arch") == 0) {
    return v.blob >= 0 && v.blob < kNumBlobs ? kBlobs[v.blob].compiled_arch : nullptr;
  }
  return nullptr;
}

}  // namespace

int set_error(int status, std::string message) { return fail(status, std::move(message)); }

int ptx_warning_count() { return g_ptx_warnings.load(); }

}  // namespace tileaot::detail

using namespace tileaot::detail;  // NOLINT: this file only implements the C ABI below

extern "C" {

int32_t tileaot_lookup(const char* op, const char* key) {
  if (op == nullptr || key == nullptr) {
    fail(TILEAOT_ERROR_INVALID, "tileaot_lookup: op and key must not be NULL");
    return -1;
  }
  std::string error;
  const int32_t handle = lookup_group(op, key, &error);
  if (handle < 0) fail(TILEAOT_ERROR_MISS, std::move(error));
  return handle;
}

int tileaot_launch(int32_t handle, int32_t device, void* stream, const void* const* ptrs,
                   int32_t n_tensors, const int64_t* shapes, int32_t n_shapes,
                   const double* scalars, int32_t n_scalars) {
  const Variant* first = group_head(handle);
  if (first == nullptr) return TILEAOT_ERROR_INVALID;
  if (int rc = check_launch_args(*first, ptrs, n_tensors, n_shapes, scalars, n_scalars)) return rc;
  const Driver* driver = nullptr;
  DeviceState* dev = nullptr;
  if (int rc = get_device(device, &driver, &dev)) return rc;
  int64_t dyn[kMaxDyn] = {};
  int32_t row = -1;
  if (int rc = select_row(handle, device, *dev, shapes, n_shapes, dyn, &row)) return rc;
  return launch_row(*driver, *dev, device, row, stream, ptrs, dyn, scalars);
}

const char* tileaot_select(int32_t handle, int32_t device, const int64_t* shapes,
                           int32_t n_shapes) {
  if (group_head(handle) == nullptr) return nullptr;
  const Driver* driver = nullptr;
  DeviceState* dev = nullptr;
  if (get_device(device, &driver, &dev) != TILEAOT_OK) return nullptr;
  int64_t dyn[kMaxDyn] = {};
  int32_t row = -1;
  if (select_row(handle, device, *dev, shapes, n_shapes, dyn, &row) != TILEAOT_OK) return nullptr;
  return kVariants[row].name;
}

int32_t tileaot_tensor_param(int32_t handle, int32_t i, const char** name, uint32_t* dlpack_dtype) {
  const Variant* v = group_head(handle);
  if (v == nullptr) return -1;
  if (i >= 0 && i < v->n_tensors) {
    if (name != nullptr) *name = v->tensor_names[i];
    if (dlpack_dtype != nullptr) *dlpack_dtype = v->tensor_dtypes[i];
  }
  return v->n_tensors;
}

int32_t tileaot_tensor_ndim(int32_t handle, int32_t i) {
  const Variant* v = group_head(handle);
  if (v == nullptr) return -1;
  if (i < 0 || i >= v->n_tensors) {
    fail(TILEAOT_ERROR_INVALID, "tileaot_tensor_ndim: " + op_label(*v) + " has " +
                                    std::to_string(v->n_tensors) + " tensors, not tensor " +
                                    std::to_string(i));
    return -1;
  }
  return v->ndims[i];
}

const char* tileaot_device_arch(int32_t device) {
  const Driver* driver = nullptr;
  DeviceState* dev = nullptr;
  if (get_device(device, &driver, &dev) != TILEAOT_OK) return nullptr;
  return dev->arch.c_str();
}

const char* tileaot_last_error(void) { return t_last_error.c_str(); }

int tileaot_last_status(void) { return t_last_status; }

const char* tileaot_build_archs(void) { return kBuildArchs; }

const char* tileaot_build_ops(void) { return kBuildOps; }

int32_t tileaot_num_variants(void) { return kNumVariants; }

const char* tileaot_variant_field(int32_t i, const char* field) {
  if (i < 0 || i >= kNumVariants || field == nullptr) {
    fail(TILEAOT_ERROR_INVALID, "tileaot_variant_field: row " + std::to_string(i) +
                                    " out of range (0.." + std::to_string(kNumVariants) + ")");
    return nullptr;
  }
  const char* value = variant_field(kVariants[i], field);
  if (value == nullptr) {
    fail(TILEAOT_ERROR_INVALID, std::string("tileaot_variant_field: unknown field '") + field +
                                    "' (name, op, key, spec, arch, signature, blob_arch)");
  }
  return value;
}

}  // extern "C"
