// The C++ layer's checks and errors against the installed libtileaot, with or without a GPU:
// nothing here launches a kernel (every call is rejected before, or aimed at a device that does
// not exist). Prints "OK" and exits 0 when every expectation holds.
#include <cstdint>
#include <cstdio>
#include <string>

#include "tileaot/tileaot.hpp"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what.c_str());
    ++failures;
  }
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs `call`, expecting exception E whose message contains `part`.
template <typename E, typename F>
void expect_throw(const char* what, F call, const std::string& part) {
  try {
    call();
    expect(false, std::string(what) + ": no exception");
  } catch (const E& e) {
    expect(contains(e.what(), part),
           std::string(what) + ": message '" + e.what() + "' lacks '" + part + "'");
  } catch (const std::exception& e) {
    expect(false, std::string(what) + ": wrong exception: " + e.what());
  }
}

// DLPack's DLTensor layout, declared here as a framework's copy of dlpack.h would.
struct DLDevice {
  int32_t device_type;
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
  int64_t* strides;
  uint64_t byte_offset;
};

// Fake, aligned device addresses: never dereferenced, since nothing is launched.
void* fake(uintptr_t address) { return reinterpret_cast<void*>(address); }

void check_lookup() {
  expect_throw<tileaot::VariantMissError>(
      "unknown key", [] { tileaot::Op("rms_norm", "fp64"); }, "rms_norm");
  const tileaot::Op op("rms_norm", "bf16");
  expect(op.num_tensors() == 3, "rms_norm takes x, weight, y");
  expect(contains(op.signature(), "weight["), "signature names weight: " + op.signature());
}

void check_arguments() {
  const tileaot::Op op("rms_norm", "bf16");
  const auto bf16 = tileaot::DType::kBFloat16;
  const tileaot::TensorView x(fake(0x10000), {4, 64}, bf16), w(fake(0x20000), {64}, bf16),
      y(fake(0x30000), {4, 64}, bf16);
  expect_throw<tileaot::InvalidArgument>(
      "count", [&] { op.launch(nullptr, {x, w}, {1e-6}); }, "takes 3 tensors");
  const tileaot::TensorView w16(fake(0x20000), {64}, tileaot::DType::kFloat16);
  expect_throw<tileaot::InvalidArgument>(
      "dtype", [&] { op.launch(nullptr, {x, w16, y}, {1e-6}); },
      "float16; this key takes bfloat16");
  const tileaot::TensorView odd(fake(0x30002), {4, 64}, bf16);
  expect_throw<tileaot::InvalidArgument>(
      "alignment", [&] { op.launch(nullptr, {x, w, odd}, {1e-6}); }, "16-byte aligned");
  const tileaot::TensorView elsewhere(fake(0x30000), {4, 64}, bf16, 1);
  expect_throw<tileaot::InvalidArgument>(
      "devices", [&] { op.launch(nullptr, {x, w, elsewhere}, {1e-6}); }, "device 1");
  const tileaot::TensorView huge(fake(0x30000), {int64_t(1) << 20, int64_t(1) << 12}, bf16);
  expect_throw<tileaot::InvalidArgument>(
      "int32", [&] { op.launch(nullptr, {huge, w, y}, {1e-6}); }, "below 2**31");
  // An empty tensor: nothing to do, and no driver needed to do it.
  const tileaot::TensorView none(fake(0x10000), {0, 64}, bf16), y0(fake(0x30000), {0, 64}, bf16);
  op.launch(nullptr, {none, w, y0}, {1e-6});
}

void check_dltensor() {
  int64_t shape[2] = {4, 64}, transposed[2] = {1, 4};
  DLTensor t{fake(0x10000), {2, 0}, 2, {4, 16, 1}, shape, nullptr, 32};
  const tileaot::TensorView v(t);
  expect(v.data() == fake(0x10020) && v.dim(1) == 64, "DLTensor view: offset applied, shape");
  expect(v.dtype() == static_cast<uint32_t>(tileaot::DType::kBFloat16), "DLTensor dtype");
  // DLTensors go straight into a launch; this one is float32 where rms_norm[bf16] takes bf16.
  const tileaot::Op op("rms_norm", "bf16");
  DLTensor f32 = t;
  f32.dtype = {2, 32, 1};
  const tileaot::TensorView w(fake(0x20000), {64}, tileaot::DType::kBFloat16);
  expect_throw<tileaot::InvalidArgument>(
      "DLTensor dtype", [&] { op.launch(nullptr, {f32, w, t}, {1e-6}); },
      "x (tensor 0) has dtype float32");
  DLTensor cpu = t;
  cpu.device.device_type = 1;
  expect_throw<tileaot::InvalidArgument>(
      "cpu", [&] { tileaot::TensorView{cpu}; }, "not in CUDA memory");
  DLTensor strided = t;
  strided.strides = transposed;
  expect_throw<tileaot::InvalidArgument>(
      "strides", [&] { tileaot::TensorView{strided}; }, "not row-major");
}

// A device that does not exist: InvalidArgument with a driver, DriverError without one.
void check_device() {
  const tileaot::Op op("rms_norm", "bf16");
  const auto bf16 = tileaot::DType::kBFloat16;
  const tileaot::TensorView x(fake(0x10000), {4, 64}, bf16, 99), w(fake(0x20000), {64}, bf16, 99),
      y(fake(0x30000), {4, 64}, bf16, 99);
  try {
    op.launch(nullptr, {x, w, y}, {1e-6});
    expect(false, "launch on device 99: no exception");
  } catch (const tileaot::InvalidArgument& e) {
    expect(contains(e.what(), "no CUDA device 99"), std::string("device 99: ") + e.what());
  } catch (const tileaot::DriverError& e) {
    expect(e.status() == TILEAOT_ERROR_DRIVER, "DriverError carries TILEAOT_ERROR_DRIVER");
  }
  expect(!tileaot::build_archs().empty(), "build_archs");
}

}  // namespace

int main() {
  try {
    check_lookup();
    check_arguments();
    check_dltensor();
    check_device();
  } catch (const std::exception& e) {
    std::printf("FAILED: unexpected exception: %s\n", e.what());
    return 1;
  }
  std::printf(failures == 0 ? "OK\n" : "%d expectation(s) failed\n", failures);
  return failures == 0 ? 0 : 1;
}
