// tileaot._C: a thin nanobind layer over the C ABI (include/tileaot/tileaot.h).
//
// Two hot paths. launch(): the Python dispatcher passes data_ptr() ints and flat shapes, read
// with limited-API calls straight into stack arrays. call(): takes the tensors themselves and
// reads them through the framework's DLPack C exchange API (a C function pointer per tensor,
// no Python-level __dlpack__ call: DESIGN.md measured ~2.6 µs per tensor for that), checks
// dtype, device, layout, alignment and sizes here in C++, and takes the framework's current
// stream from the same API. Built with STABLE_ABI, so only limited-API CPython calls appear
// here. Importing this module never touches the CUDA driver.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "tileaot/tileaot.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

constexpr int32_t kMaxTensors = 16;
constexpr int32_t kMaxShapeValues = kMaxTensors * 8;
constexpr int32_t kMaxScalars = 16;

// C++ carriers for the module's exception types (registered in NB_MODULE).
struct VariantMiss : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct DriverFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void raise_last_error(int status) {
  const std::string message = tileaot_last_error();
  if (status == TILEAOT_ERROR_MISS) throw VariantMiss(message);
  if (status == TILEAOT_ERROR_DRIVER) throw DriverFailure(message);
  if (status == TILEAOT_ERROR_INVALID) throw nb::value_error(message.c_str());
  throw std::runtime_error(message);
}

// Reads a tuple or list of Python numbers into out[0..cap) and returns the count. `read` is a
// limited-API converter returning `sentinel` (with an exception set) on failure.
template <typename T, typename Read>
int32_t read_items(nb::handle seq, T* out, int32_t cap, const char* what, Read read, T sentinel) {
  PyObject* obj = seq.ptr();
  const bool is_tuple = PyTuple_Check(obj);
  if (!is_tuple && !PyList_Check(obj)) {
    throw nb::type_error((std::string(what) + " must be a tuple or list").c_str());
  }
  const Py_ssize_t n = is_tuple ? PyTuple_Size(obj) : PyList_Size(obj);
  if (n > cap) {
    throw nb::value_error((std::string("too many ") + what + ": " + std::to_string(n) +
                           " (at most " + std::to_string(cap) + ")")
                              .c_str());
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = is_tuple ? PyTuple_GetItem(obj, i) : PyList_GetItem(obj, i);
    out[i] = read(item);
    if (out[i] == sentinel && PyErr_Occurred()) throw nb::python_error();
  }
  return static_cast<int32_t>(n);
}

int32_t read_ptrs(nb::handle seq, const void** out) {
  unsigned long long values[kMaxTensors];
  const int32_t n = read_items(seq, values, kMaxTensors, "ptrs", PyLong_AsUnsignedLongLong,
                               static_cast<unsigned long long>(-1));
  for (int32_t i = 0; i < n; ++i) out[i] = reinterpret_cast<const void*>(values[i]);
  return n;
}

int32_t read_shapes(nb::handle seq, int64_t* out) {
  long long values[kMaxShapeValues];
  const int32_t n = read_items(seq, values, kMaxShapeValues, "shapes", PyLong_AsLongLong, -1LL);
  for (int32_t i = 0; i < n; ++i) out[i] = values[i];
  return n;
}

int32_t read_scalars(nb::handle seq, double* out) {
  return read_items(seq, out, kMaxScalars, "scalars", PyFloat_AsDouble, -1.0);
}

// ---- DLPack C exchange API (DLPack 1.2+, torch >= 2.10: type(t).__dlpack_c_exchange_api__).
// Declared here, from the DLPack spec, to keep framework headers out of the build.
struct DLDevice {
  int32_t device_type;  // kDLCUDA = 2
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // NULL: compact row-major
  uint64_t byte_offset;
};
struct DLPackExchangeAPIHeader {
  uint32_t major, minor;
  DLPackExchangeAPIHeader* prev_api;
};
struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void* py_object, DLTensor* out);
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_stream);
};
constexpr int32_t kDLCUDA = 2;
constexpr uintptr_t kAlign = 16;            // kernels load 16 bytes at a time
constexpr int64_t kInt32Limit = 1LL << 31;  // kernels index with 32-bit integers

// The exchange API of `tensor`'s type, looked up once per type.
const DLPackExchangeAPI* exchange_api(PyObject* tensor) {
  static PyTypeObject* cached_type = nullptr;
  static const DLPackExchangeAPI* cached_api = nullptr;
  PyTypeObject* type = Py_TYPE(tensor);
  if (type == cached_type) return cached_api;
  nb::object capsule = nb::steal(
      PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__dlpack_c_exchange_api__"));
  if (!capsule.is_valid()) {
    PyErr_Clear();
    throw nb::type_error(
        "tileaot: tensors must support the DLPack C exchange API "
        "(type(t).__dlpack_c_exchange_api__; torch >= 2.10)");
  }
  auto* api = static_cast<const DLPackExchangeAPI*>(
      PyCapsule_GetPointer(capsule.ptr(), "dlpack_exchange_api"));
  if (api == nullptr) throw nb::python_error();
  if (api->header.major != 1) {
    throw nb::type_error(("tileaot: unsupported DLPack exchange API major version " +
                          std::to_string(api->header.major))
                             .c_str());
  }
  cached_type = type;
  cached_api = api;
  return api;
}

std::string dtype_name(uint32_t packed) {
  const uint32_t code = packed & 0xff, bits = (packed >> 8) & 0xff;
  switch (code) {
    case 0:
      return "int" + std::to_string(bits);
    case 1:
      return "uint" + std::to_string(bits);
    case 2:
      return "float" + std::to_string(bits);
    case 4:
      return "bfloat16";
    case 6:
      return "bool";
    case 10:
      return "float8_e4m3fn";
    case 12:
      return "float8_e5m2";
    default:
      return "dlpack(code " + std::to_string(code) + ", bits " + std::to_string(bits) + ")";
  }
}

std::string shape_text(const DLTensor& t) {
  std::string out = "[";
  for (int32_t d = 0; d < t.ndim; ++d) out += (d ? ", " : "") + std::to_string(t.shape[d]);
  return out + "]";
}

bool is_row_major(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expected = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

// Raises TypeError/ValueError naming the op and the argument; returns the element count.
int64_t check_tensor(int32_t handle, int32_t i, const DLTensor& t, int32_t* device) {
  const char* name = "";
  uint32_t want = 0;
  tileaot_tensor_param(handle, i, &name, &want);
  // "op: name", for the messages only: built when a check fails, not on every call.
  const auto who = [&] { return std::string(tileaot_variant_field(handle, "op")) + ": " + name; };
  // Each tensor its own rank: concatenated shapes of the right total length can still match
  // the variant's pattern with dims moved between tensors (a 1-D out read as [M, N]).
  const int32_t ndim = tileaot_tensor_ndim(handle, i);
  if (t.ndim != ndim) {
    throw nb::value_error((who() + " has " + std::to_string(t.ndim) + " dims (shape " +
                           shape_text(t) + "); this kernel takes " + std::to_string(ndim))
                              .c_str());
  }
  const uint32_t got = t.dtype.code | uint32_t(t.dtype.bits) << 8 | uint32_t(t.dtype.lanes) << 16;
  if (got != want) {
    throw nb::type_error((who() + " has dtype " + dtype_name(got) + "; expected " +
                          dtype_name(want) + " for this key")
                             .c_str());
  }
  if (t.device.device_type != kDLCUDA) {
    throw nb::value_error((who() + " is not in CUDA memory (DLPack device type " +
                           std::to_string(t.device.device_type) + "); move it with .cuda()")
                              .c_str());
  }
  if (*device < 0) *device = t.device.device_id;
  if (t.device.device_id != *device) {
    throw nb::value_error((who() + " is on cuda:" + std::to_string(t.device.device_id) +
                           ", the first tensor on cuda:" + std::to_string(*device))
                              .c_str());
  }
  if (!is_row_major(t)) {
    throw nb::value_error((who() + " is not contiguous; call .contiguous() on it first").c_str());
  }
  int64_t numel = 1;  // dims < 2**31 keep the product below 2**62: no overflow
  for (int32_t d = 0; d < t.ndim && numel < kInt32Limit; ++d) {
    numel = t.shape[d] >= kInt32Limit ? kInt32Limit : numel * t.shape[d];
  }
  if (numel >= kInt32Limit) {
    throw nb::value_error((who() + " has shape " + shape_text(t) +
                           ": dimensions and element count must stay below 2**31")
                              .c_str());
  }
  const uintptr_t address = reinterpret_cast<uintptr_t>(t.data) + t.byte_offset;
  if (numel > 0 && address % kAlign != 0) {
    throw nb::value_error(
        (who() + " is not 16-byte aligned (a view at an offset?); .clone() it").c_str());
  }
  return numel;
}

int32_t lookup(const char* op, const char* key) {
  const int32_t handle = tileaot_lookup(op, key);
  if (handle < 0) raise_last_error(tileaot_last_status());
  return handle;
}

void launch(int32_t handle, int32_t device, uintptr_t stream, nb::handle ptrs, nb::handle shapes,
            nb::handle scalars) {
  const void* p[kMaxTensors];
  int64_t s[kMaxShapeValues];
  double c[kMaxScalars];
  const int32_t n_ptrs = read_ptrs(ptrs, p);
  const int32_t n_shapes = read_shapes(shapes, s);
  const int32_t n_scalars = read_scalars(scalars, c);
  int rc;
  {
    nb::gil_scoped_release release;  // other Python threads run while we enqueue
    rc = tileaot_launch(handle, device, reinterpret_cast<void*>(stream), p, n_ptrs, s, n_shapes, c,
                        n_scalars);
  }
  if (rc != TILEAOT_OK) raise_last_error(rc);
}

// Byte range [begin, end) of a checked tensor (row-major, so contiguous).
struct Span {
  uintptr_t begin, end;
};

Span span_of(const DLTensor& t, int64_t numel) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data) + t.byte_offset;
  const uint64_t item_bits = uint64_t(t.dtype.bits) * t.dtype.lanes;
  return {begin, begin + static_cast<uintptr_t>((uint64_t(numel) * item_bits + 7) / 8)};
}

// An output tensor (bit i of `outputs`) must not share a byte with any other tensor: the
// kernels read inputs while writing outputs and assume no aliasing.
void check_no_overlap(int32_t handle, const Span* spans, int32_t n, uint32_t outputs) {
  for (int32_t i = 0; i < n; ++i) {
    if (!(outputs >> i & 1u) || spans[i].begin == spans[i].end) continue;
    for (int32_t j = 0; j < n; ++j) {
      if (j == i || spans[j].begin == spans[j].end) continue;
      if (spans[i].begin < spans[j].end && spans[j].begin < spans[i].end) {
        const char *out_name = "", *other = "";
        tileaot_tensor_param(handle, i, &out_name, nullptr);
        tileaot_tensor_param(handle, j, &other, nullptr);
        throw nb::value_error((std::string(tileaot_variant_field(handle, "op")) + ": output " +
                               out_name + " overlaps " + other + " in memory; pass a separate " +
                               "tensor")
                                  .c_str());
      }
    }
  }
}

// Launch with the tensors themselves: every check in C++, stream from the framework. Returns
// false, launching nothing, if a tensor is empty: what an empty call means is the op's to say.
bool call(int32_t handle, nb::handle tensors, nb::handle scalars, uint32_t outputs) {
  PyObject* seq = tensors.ptr();
  if (!PyTuple_Check(seq)) throw nb::type_error("tensors must be a tuple");
  const Py_ssize_t n = PyTuple_Size(seq);
  const int32_t expected = tileaot_tensor_param(handle, -1, nullptr, nullptr);
  if (expected < 0) raise_last_error(tileaot_last_status());
  if (n != expected || n == 0) {
    throw nb::value_error(
        ("expected " + std::to_string(expected) + " tensors, got " + std::to_string(n)).c_str());
  }
  const DLPackExchangeAPI* api = exchange_api(PyTuple_GetItem(seq, 0));
  const void* ptrs[kMaxTensors];
  Span spans[kMaxTensors];
  int64_t shapes[kMaxShapeValues];
  int32_t n_shapes = 0, device = -1;
  bool empty = false;
  for (int32_t i = 0; i < n; ++i) {
    DLTensor t;
    if (api->dltensor_from_py_object_no_sync(PyTuple_GetItem(seq, i), &t) != 0) {
      throw nb::python_error();
    }
    const int64_t numel = check_tensor(handle, i, t, &device);
    empty |= numel == 0;
    spans[i] = span_of(t, numel);
    if (n_shapes + t.ndim > kMaxShapeValues) throw nb::value_error("too many dimensions");
    for (int32_t d = 0; d < t.ndim; ++d) shapes[n_shapes++] = t.shape[d];
    ptrs[i] = static_cast<const char*>(t.data) + t.byte_offset;
  }
  if (outputs != 0) check_no_overlap(handle, spans, static_cast<int32_t>(n), outputs);
  double c[kMaxScalars];
  const int32_t n_scalars = read_scalars(scalars, c);
  if (empty) return false;  // nothing to launch (and empty tensors may have no storage)
  void* stream = nullptr;
  if (api->current_work_stream(kDLCUDA, device, &stream) != 0) throw nb::python_error();
  int rc;
  {
    nb::gil_scoped_release release;
    rc = tileaot_launch(handle, device, stream, ptrs, static_cast<int32_t>(n), shapes, n_shapes, c,
                        n_scalars);
  }
  if (rc != TILEAOT_OK) raise_last_error(rc);
  return true;
}

std::string select_variant(int32_t handle, int32_t device, nb::handle shapes) {
  int64_t s[kMaxShapeValues];
  const int32_t n_shapes = read_shapes(shapes, s);
  const char* name;
  {
    nb::gil_scoped_release release;  // the first call may load the driver (cuInit)
    name = tileaot_select(handle, device, s, n_shapes);
  }
  if (name == nullptr) raise_last_error(tileaot_last_status());
  return name;
}

nb::object device_arch(int32_t device) {
  const char* arch;
  {
    nb::gil_scoped_release release;
    arch = tileaot_device_arch(device);
  }
  if (arch == nullptr) return nb::none();
  return nb::str(arch);
}

nb::list variants() {
  static const char* const kFields[] = {"name", "op",        "key",      "spec",
                                        "arch", "signature", "blob_arch"};
  nb::list rows;
  for (int32_t i = 0; i < tileaot_num_variants(); ++i) {
    nb::dict row;
    for (const char* field : kFields) {
      const char* value = tileaot_variant_field(i, field);
      row[field] = value ? value : "";
    }
    rows.append(row);
  }
  return rows;
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "tileaot native runtime: ahead-of-time compiled TileLang kernels (no JIT).";

  nb::exception<VariantMiss>(m, "VariantMissError", PyExc_LookupError);
  nb::exception<DriverFailure>(m, "DriverError", PyExc_RuntimeError);

  m.def("lookup", &lookup, "op"_a, "key"_a,
        "Handle of (op, key), e.g. ('rms_norm', 'bf16'); VariantMissError if not built.");
  m.def("launch", &launch, "handle"_a, "device"_a, "stream"_a, "ptrs"_a, "shapes"_a, "scalars"_a,
        nb::sig("def launch(handle: int, device: int, stream: int, "
                "ptrs: tuple[int, ...] | list[int], shapes: tuple[int, ...] | list[int], "
                "scalars: tuple[float, ...] | list[float]) -> None"),
        "Launch on `stream` (a raw CUstream int) of CUDA device `device`. ptrs: data pointers;\n"
        "shapes: all tensor dims, concatenated; scalars: the op's runtime scalars.\n"
        "Raises ValueError (bad counts), VariantMissError, DriverError.");
  m.def("call", &call, "handle"_a, "tensors"_a, "scalars"_a, "outputs"_a = 0,
        nb::sig("def call(handle: int, tensors: tuple, "
                "scalars: tuple[float, ...] | list[float], outputs: int = 0) -> bool"),
        "Launch with the tensors themselves (read through the DLPack C exchange API) on the\n"
        "framework's current stream of their device. Checks dtype (against the key), CUDA\n"
        "device, contiguity, 16-byte alignment, int32 sizes and, for each tensor whose bit is\n"
        "set in `outputs`, that it overlaps no other tensor, before launching. Returns True\n"
        "once launched; False, launching nothing, if a tensor is empty. Raises TypeError,\n"
        "ValueError, VariantMissError (shapes no variant takes), DriverError.");
  m.def("select", &select_variant, "handle"_a, "device"_a, "shapes"_a,
        nb::sig("def select(handle: int, device: int, "
                "shapes: tuple[int, ...] | list[int]) -> str"),
        "Name of the variant a launch with these shapes would use on `device`.");
  m.def("device_arch", &device_arch, "device"_a,
        nb::sig("def device_arch(device: int) -> str | None"),
        "'sm_90a'-style SASS target of CUDA device `device`; None without a driver or device.");
  m.def("build_archs", &tileaot_build_archs, "Archs this library was built for, comma-joined.");
  m.def("build_ops", &tileaot_build_ops, "Ops filter this library was built with ('*': all).");
  m.def("variants", &variants, nb::sig("def variants() -> list[dict[str, str]]"),
        "Every built variant: name, op, key, spec, arch, signature, blob_arch.");
}
