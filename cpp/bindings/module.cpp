// tileaot._C: a thin nanobind layer over the C ABI (include/tileaot/tileaot.h).
//
// launch() is the hot path: the Python dispatcher passes data_ptr() ints and flat shapes, and
// we read them with limited-API calls straight into stack arrays (no nb::ndarray, no DLPack:
// DESIGN.md measured ~2.6 µs per tensor for those). Built with STABLE_ABI, so only limited-API
// CPython calls appear here. Importing this module never touches the CUDA driver.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "status.h"
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
