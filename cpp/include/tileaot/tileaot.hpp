// tileaot C++ API: exceptions, tensor views and op handles over the C ABI of <tileaot/tileaot.h>.
//
// Header-only, C++17, and like the C header it needs no CUDA or torch headers: a stream is a
// `void*`, so a cudaStream_t or a CUstream converts to it as it is.
//
//   tileaot::Op rms_norm("rms_norm", "bf16");           // VariantMissError if not in the build
//   tileaot::TensorView x(x_ptr, {m, n}, tileaot::DType::kBFloat16);  // or a DLPack DLTensor
//   rms_norm.launch(stream, {x, weight, y}, {1e-6});    // asynchronous on `stream`
//
// Tensors go in the op's parameter order, which Op::signature() spells out (for rms_norm
// "x[M,N] weight[N] y[M,N] eps"). Every check (tensor count, dtype, device, row-major
// layout, 16-byte alignment, sizes below 2**31) runs before the launch and throws
// InvalidArgument; a call with an empty tensor is a no-op, as in the Python API.
#ifndef TILEAOT_TILEAOT_HPP_
#define TILEAOT_TILEAOT_HPP_

#if !defined(__cplusplus) || __cplusplus < 201703L
#error \
    "<tileaot/tileaot.hpp> needs C++17 (-std=c++17, or CXX_STANDARD 17 in CMake); C code includes <tileaot/tileaot.h>"
#endif

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tileaot/tileaot.h"

namespace tileaot {

// ---- errors -----------------------------------------------------------------------------------

// Base of every tileaot exception; status() is the C ABI's enum tileaot_status.
class Error : public std::runtime_error {
 public:
  Error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const noexcept { return status_; }

 private:
  int status_;
};

// Bad arguments: wrong tensor count, dtype, device, layout, alignment or size.
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& message) : Error(TILEAOT_ERROR_INVALID, message) {}
};

// No variant in this build for the op, key, shapes or GPU; the message names the nearest
// variants built and the build option that adds one.
class VariantMissError : public Error {
 public:
  explicit VariantMissError(const std::string& message) : Error(TILEAOT_ERROR_MISS, message) {}
};

// The CUDA driver is missing or one of its calls failed (the message names the call).
class DriverError : public Error {
 public:
  explicit DriverError(const std::string& message) : Error(TILEAOT_ERROR_DRIVER, message) {}
};

// Throws the exception class that belongs to `status`.
[[noreturn]] inline void throw_error(int status, const std::string& message) {
  switch (status) {
    case TILEAOT_ERROR_INVALID:
      throw InvalidArgument(message);
    case TILEAOT_ERROR_MISS:
      throw VariantMissError(message);
    case TILEAOT_ERROR_DRIVER:
      throw DriverError(message);
    default:
      throw Error(status, message);
  }
}

// Throws this thread's last failure of the C ABI.
[[noreturn]] inline void throw_last_error() {
  throw_error(tileaot_last_status(), tileaot_last_error());
}

// ---- data types -------------------------------------------------------------------------------

// DLPack data types, packed as the C ABI reports them: code | bits << 8 | lanes << 16.
enum class DType : uint32_t {
  kInt32 = 0u | 32u << 8 | 1u << 16,
  kUInt8 = 1u | 8u << 8 | 1u << 16,
  kFloat16 = 2u | 16u << 8 | 1u << 16,
  kFloat32 = 2u | 32u << 8 | 1u << 16,
  kBFloat16 = 4u | 16u << 8 | 1u << 16,
  kFloat8E4M3FN = 10u | 8u << 8 | 1u << 16,
};

// "bfloat16", "float32", ... for a packed DLPack dtype (used in error messages).
inline std::string dtype_name(uint32_t packed) {
  const uint32_t code = packed & 0xffu, bits = (packed >> 8) & 0xffu, lanes = packed >> 16;
  std::string name;
  switch (code) {
    case 0:
      name = "int" + std::to_string(bits);
      break;
    case 1:
      name = "uint" + std::to_string(bits);
      break;
    case 2:
      name = "float" + std::to_string(bits);
      break;
    case 4:
      name = "bfloat16";
      break;
    case 6:
      name = "bool";
      break;
    case 10:
      name = "float8_e4m3fn";
      break;
    case 12:
      name = "float8_e5m2";
      break;
    default:
      name = "dlpack(code " + std::to_string(code) + ", bits " + std::to_string(bits) + ")";
  }
  return lanes == 1 ? name : name + "x" + std::to_string(lanes);
}

// ---- tensor views -----------------------------------------------------------------------------

namespace detail {

constexpr int32_t kDLCUDA = 2;              // DLPack device types the kernels can read
constexpr int32_t kDLCUDAManaged = 13;      //   (device memory, managed memory)
constexpr int64_t kInt32Limit = 1LL << 31;  // kernels index with 32-bit integers
constexpr uintptr_t kAlign = 16;            // kernels move 16 bytes at a time

// True for DLPack's DLTensor and any struct with its fields (so that this header needs no
// dlpack.h, and works with whichever copy of it a framework ships).
template <typename T, typename = void>
struct is_dltensor : std::false_type {};
template <typename T>
struct is_dltensor<
    T, std::void_t<decltype(std::declval<const T&>().data), decltype(std::declval<const T&>().ndim),
                   decltype(std::declval<const T&>().shape[0]),
                   decltype(std::declval<const T&>().strides),
                   decltype(std::declval<const T&>().byte_offset),
                   decltype(std::declval<const T&>().dtype.lanes),
                   decltype(std::declval<const T&>().device.device_type)>> : std::true_type {};

}  // namespace detail

// A non-owning view of a row-major tensor in CUDA memory: what tileaot kernels read and write.
class TensorView {
 public:
  static constexpr int32_t kMaxDims = 8;

  // A contiguous row-major tensor at `data` (device memory of CUDA device `device`).
  TensorView(const void* data, std::initializer_list<int64_t> shape, DType dtype,
             int32_t device = 0)
      : TensorView(data, shape.begin(), static_cast<int32_t>(shape.size()), dtype, device) {}

  TensorView(const void* data, const int64_t* shape, int32_t ndim, DType dtype, int32_t device = 0)
      : data_(data), dtype_(static_cast<uint32_t>(dtype)), device_(device) {
    set_shape(shape, ndim);
  }

  // A DLPack DLTensor (e.g. DLManagedTensor::dl_tensor of a framework's tensor): it must live
  // in CUDA memory and be row-major; its byte_offset is applied here. Implicit, so that
  // `op.launch(stream, {x, w, y})` takes DLTensors as they are.
  template <typename DL, std::enable_if_t<detail::is_dltensor<DL>::value, int> = 0>
  TensorView(const DL& t)  // NOLINT(google-explicit-constructor)
      : data_(static_cast<const char*>(t.data) + t.byte_offset),
        dtype_(uint32_t(t.dtype.code) | uint32_t(t.dtype.bits) << 8 |
               uint32_t(t.dtype.lanes) << 16),
        device_(t.device.device_id) {
    const int32_t type = static_cast<int32_t>(t.device.device_type);
    if (type != detail::kDLCUDA && type != detail::kDLCUDAManaged) {
      throw InvalidArgument("tileaot: a DLTensor is not in CUDA memory (DLPack device type " +
                            std::to_string(type) + "); copy it to the GPU first");
    }
    set_shape(t.shape, t.ndim);
    if (!row_major(t.strides)) {
      throw InvalidArgument("tileaot: a DLTensor of shape " + shape_text() +
                            " is not row-major contiguous; make a contiguous copy first");
    }
  }

  const void* data() const noexcept { return data_; }
  int32_t ndim() const noexcept { return ndim_; }
  const int64_t* shape() const noexcept { return shape_; }
  int64_t dim(int32_t i) const noexcept { return shape_[i]; }
  uint32_t dtype() const noexcept { return dtype_; }
  int32_t device() const noexcept { return device_; }

  // Element count, saturated at 2**31 (the kernels' limit) so that it cannot overflow.
  int64_t numel() const noexcept {
    int64_t n = 1;
    for (int32_t d = 0; d < ndim_ && n > 0 && n < detail::kInt32Limit; ++d) {
      n = shape_[d] >= detail::kInt32Limit ? detail::kInt32Limit : n * shape_[d];
    }
    return n < detail::kInt32Limit ? n : detail::kInt32Limit;
  }

  // "[4096, 7168]".
  std::string shape_text() const {
    std::string out = "[";
    for (int32_t d = 0; d < ndim_; ++d) out += (d ? ", " : "") + std::to_string(shape_[d]);
    return out + "]";
  }

 private:
  void set_shape(const int64_t* shape, int32_t ndim) {
    if (ndim < 0 || ndim > kMaxDims || (ndim > 0 && shape == nullptr)) {
      throw InvalidArgument("tileaot: a tensor view has " + std::to_string(ndim) +
                            " dimensions; tileaot kernels take 0 to " + std::to_string(kMaxDims));
    }
    ndim_ = ndim;
    for (int32_t d = 0; d < ndim; ++d) {
      if (shape[d] < 0) {
        throw InvalidArgument("tileaot: a tensor view has a negative dimension " +
                              std::to_string(shape[d]));
      }
      shape_[d] = shape[d];
    }
  }

  // DLPack strides count elements; NULL means compact row-major. Size-1 dims may have any.
  bool row_major(const int64_t* strides) const {
    if (strides == nullptr) return true;
    int64_t expected = 1;
    for (int32_t d = ndim_ - 1; d >= 0; --d) {
      if (shape_[d] != 1 && strides[d] != expected) return false;
      expected *= shape_[d];
    }
    return true;
  }

  const void* data_;
  int64_t shape_[kMaxDims] = {};
  int32_t ndim_ = 0;
  uint32_t dtype_;
  int32_t device_;
};

// ---- ops --------------------------------------------------------------------------------------

// An op and its dispatch key (the dtypes and modes of a call, comma-joined: "bf16" for
// rms_norm, "bf16,g128" for per_token_cast_fp8); the runtime picks the variant per call from
// the shapes and the GPU. Cheap to copy; look it up once and keep it.
class Op {
 public:
  static constexpr int32_t kMaxTensors = 16;
  static constexpr int32_t kMaxScalars = 16;

  // Throws VariantMissError (naming the keys that are built) if this build lacks (op, key).
  Op(std::string op, std::string key) : op_(std::move(op)), key_(std::move(key)) {
    handle_ = tileaot_lookup(op_.c_str(), key_.c_str());
    if (handle_ < 0) throw_last_error();
    n_tensors_ = tileaot_tensor_param(handle_, -1, nullptr, nullptr);
  }

  const std::string& op() const noexcept { return op_; }
  const std::string& key() const noexcept { return key_; }
  int32_t handle() const noexcept { return handle_; }
  int32_t num_tensors() const noexcept { return n_tensors_; }

  // Tensors and scalars in call order, as shapes of the most specialised variant, e.g.
  // "x[M,7168] weight[7168] y[M,7168] eps"; the generic variant takes any M and N.
  std::string signature() const {
    const char* text = tileaot_variant_field(handle_, "signature");
    return text != nullptr ? text : "";
  }

  // Launches on `stream` (a cudaStream_t/CUstream; nullptr: the legacy default stream) of the
  // tensors' device. Returns once the work is enqueued. Throws InvalidArgument (before any
  // launch), VariantMissError (no variant for these shapes on this GPU) or DriverError.
  void launch(void* stream, std::initializer_list<TensorView> tensors,
              std::initializer_list<double> scalars = {}) const {
    launch(stream, tensors.begin(), tensors.size(), scalars.begin(), scalars.size());
  }

  void launch(void* stream, const TensorView* tensors, size_t n_tensors, const double* scalars,
              size_t n_scalars) const {
    Flat flat;
    if (!flatten(tensors, n_tensors, &flat)) return;  // an empty tensor: nothing to compute
    if (n_scalars > size_t(kMaxScalars)) {
      throw InvalidArgument(label() + ": " + std::to_string(n_scalars) + " scalars (at most " +
                            std::to_string(kMaxScalars) + ")");
    }
    const int rc =
        tileaot_launch(handle_, flat.device, stream, flat.ptrs, flat.n_tensors, flat.shapes,
                       flat.n_shapes, scalars, static_cast<int32_t>(n_scalars));
    if (rc != TILEAOT_OK) throw_last_error();
  }

  // Name of the variant a launch with these tensors would use on their device, without
  // launching (e.g. "rms_norm_bf16_n7168"). Needs the driver; throws as launch() does.
  std::string select(std::initializer_list<TensorView> tensors) const {
    return select(tensors.begin(), tensors.size());
  }

  std::string select(const TensorView* tensors, size_t n_tensors) const {
    Flat flat;
    flatten(tensors, n_tensors, &flat);
    const char* name = tileaot_select(handle_, flat.device, flat.shapes, flat.n_shapes);
    if (name == nullptr) throw_last_error();
    return name;
  }

 private:
  // The C ABI's view of a call: pointers and the tensors' dims, concatenated.
  struct Flat {
    const void* ptrs[kMaxTensors];
    int64_t shapes[kMaxTensors * TensorView::kMaxDims];
    int32_t n_tensors = 0;
    int32_t n_shapes = 0;
    int32_t device = -1;
  };

  std::string label() const { return "tileaot: " + op_ + "[" + key_ + "]"; }

  // Checks every tensor and fills `flat`; returns false if one of them is empty.
  bool flatten(const TensorView* tensors, size_t n, Flat* flat) const {
    if (n != size_t(n_tensors_) || (n > 0 && tensors == nullptr)) {
      throw InvalidArgument(label() + " takes " + std::to_string(n_tensors_) + " tensors (" +
                            signature() + "), got " + std::to_string(n));
    }
    if (n_tensors_ > kMaxTensors) {  // a library newer than this header
      throw InvalidArgument(label() + " has " + std::to_string(n_tensors_) +
                            " tensors; this tileaot.hpp handles at most " +
                            std::to_string(kMaxTensors));
    }
    bool any_empty = false;
    for (int32_t i = 0; i < n_tensors_; ++i) {
      const TensorView& t = tensors[i];
      any_empty |= check(i, t, &flat->device) == 0;
      flat->ptrs[i] = t.data();
      for (int32_t d = 0; d < t.ndim(); ++d) flat->shapes[flat->n_shapes++] = t.dim(d);
    }
    flat->n_tensors = n_tensors_;
    return !any_empty;
  }

  // Checks tensor i against parameter i; returns its element count.
  int64_t check(int32_t i, const TensorView& t, int32_t* device) const {
    const char* name = "";
    uint32_t want = 0;
    tileaot_tensor_param(handle_, i, &name, &want);
    const std::string who = label() + ": " + name + " (tensor " + std::to_string(i) + ")";
    if (t.dtype() != want) {
      throw InvalidArgument(who + " has dtype " + dtype_name(t.dtype()) + "; this key takes " +
                            dtype_name(want));
    }
    if (*device < 0) *device = t.device();
    if (t.device() != *device) {
      throw InvalidArgument(who + " is on CUDA device " + std::to_string(t.device()) +
                            ", the first tensor on device " + std::to_string(*device));
    }
    const int64_t numel = t.numel();
    if (numel >= detail::kInt32Limit) {
      throw InvalidArgument(who + " has shape " + t.shape_text() +
                            ": dimensions and element count must stay below 2**31");
    }
    if (numel > 0 &&
        (t.data() == nullptr || reinterpret_cast<uintptr_t>(t.data()) % detail::kAlign != 0)) {
      throw InvalidArgument(who + " is NULL or not 16-byte aligned (a view at an offset?)");
    }
    return numel;
  }

  std::string op_, key_;
  int32_t handle_ = -1;
  int32_t n_tensors_ = 0;
};

// ---- this build and this machine --------------------------------------------------------------

// "sm_90a"-style SASS target of CUDA device `device`; throws DriverError without a driver,
// InvalidArgument for a device index that does not exist.
inline std::string device_arch(int32_t device) {
  const char* arch = tileaot_device_arch(device);
  if (arch == nullptr) throw_last_error();
  return arch;
}

// The archs ("sm_80,sm_90a") and ops filter ("*" = all) this library was built with.
inline std::string build_archs() { return tileaot_build_archs(); }
inline std::string build_ops() { return tileaot_build_ops(); }

}  // namespace tileaot

#endif  // TILEAOT_TILEAOT_HPP_
