// tileaot from C++: RMSNorm, a GEMM and the MoE dispatch (moe_expand, with its scratch from one
// workspace) with the prebuilt bf16 kernels, checked on the host.
//
// tileaot's headers need no CUDA headers; this program uses the CUDA runtime only for its own
// memory and stream. Exit status: 0 all checks passed, 1 a check failed or an error, 77 no
// usable CUDA device (skipped, as CTest's SKIP_RETURN_CODE and automake count it).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tileaot/ops.hpp"  // typed functions per op (generated); includes tileaot.hpp

namespace {

constexpr int kSkipped = 77;
// Both sides accumulate in float32; the output is rounded to bf16 (8 significant bits), so one
// rounding step apart is 2**-7 relative: torch.testing's bf16 default (rtol 1.6e-2) covers it.
constexpr double kRtol = 1.6e-2;

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

// bf16 is the upper half of a float32; round to nearest even (inputs here are finite).
uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float from_bf16(uint16_t value) {
  const uint32_t bits = uint32_t(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> out(n);
  for (auto& v : out) v = to_bf16(dist(gen));
  return out;
}

// A bf16 array in device memory, freed on scope exit.
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    check_cuda(cudaMalloc(&ptr_, n * sizeof(uint16_t)), "cudaMalloc");
  }
  explicit DeviceArray(const std::vector<uint16_t>& host) : DeviceArray(host.size()) {
    check_cuda(cudaMemcpy(ptr_, host.data(), n_ * sizeof(uint16_t), cudaMemcpyHostToDevice),
               "cudaMemcpy to the device");
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr_); }

  void* get() const { return ptr_; }
  std::vector<uint16_t> to_host() const {
    std::vector<uint16_t> out(n_);
    check_cuda(cudaMemcpy(out.data(), ptr_, n_ * sizeof(uint16_t), cudaMemcpyDeviceToHost),
               "cudaMemcpy to the host");
    return out;
  }

 private:
  void* ptr_ = nullptr;
  size_t n_;
};

// Counts the elements outside |got - want| <= atol + kRtol * |want| and prints a summary.
bool compare(const char* what, const std::vector<uint16_t>& got, const std::vector<double>& want,
             double atol) {
  size_t bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(from_bf16(got[i]) - want[i]);
    worst = std::fmax(worst, err);
    if (!(err <= atol + kRtol * std::fabs(want[i]))) ++bad;  // NaN counts as bad
  }
  std::printf("%s: %zu values, max abs error %.3g, %zu outside tolerance: %s\n", what, got.size(),
              worst, bad, bad == 0 ? "PASS" : "FAIL");
  return bad == 0;
}

// y = x / sqrt(mean(x**2) + eps) * w over rows of N = 7168 (a prebuilt specialisation).
bool run_rms_norm(cudaStream_t stream) {
  const int64_t m = 256, n = 7168;
  const double eps = 1e-6;
  const auto x = random_bf16(m * n, 1), w = random_bf16(n, 2);
  DeviceArray dx(x), dw(w), dy(m * n);
  const tileaot::DType bf16 = tileaot::DType::kBFloat16;
  const tileaot::TensorView tx(dx.get(), {m, n}, bf16), tw(dw.get(), {n}, bf16),
      ty(dy.get(), {m, n}, bf16);

  const tileaot::Op rms_norm("rms_norm", "bf16");
  std::printf("rms_norm %s -> variant %s\n", rms_norm.signature().c_str(),
              rms_norm.select({tx, tw, ty}).c_str());
  // The typed function of <tileaot/ops.hpp> (generated from the op's schema): the key comes
  // from x's dtype, the tensors in the kernel's order; the same as rms_norm.launch(...).
  tileaot::rms_norm(stream, tx, tw, ty, static_cast<float>(eps));
  check_cuda(cudaStreamSynchronize(stream), "rms_norm");

  std::vector<double> want(m * n);
  for (int64_t i = 0; i < m; ++i) {
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += std::pow(from_bf16(x[i * n + j]), 2);
    const double inv = 1.0 / std::sqrt(sum / n + eps);
    for (int64_t j = 0; j < n; ++j)
      want[i * n + j] = from_bf16(x[i * n + j]) * inv * from_bf16(w[j]);
  }
  return compare("rms_norm bf16 [256, 7168]", dy.to_host(), want, 1e-5);
}

// c = a @ b.T with a [M, K], b [N, K] at (N, K) = (7168, 2048) (a prebuilt specialisation).
bool run_gemm(cudaStream_t stream) {
  const int64_t m = 64, n = 7168, k = 2048;
  const auto a = random_bf16(m * k, 3), b = random_bf16(n * k, 4);
  DeviceArray da(a), db(b), dc(m * n);
  const tileaot::DType bf16 = tileaot::DType::kBFloat16;
  const tileaot::TensorView ta(da.get(), {m, k}, bf16), tb(db.get(), {n, k}, bf16),
      tc(dc.get(), {m, n}, bf16);

  const tileaot::Op gemm("gemm", "bf16");
  std::printf("gemm %s -> variant %s\n", gemm.signature().c_str(),
              gemm.select({ta, tb, tc}).c_str());
  tileaot::gemm(stream, ta, tb, tc);  // <tileaot/ops.hpp>; gemm.launch(stream, {ta, tb, tc})
  check_cuda(cudaStreamSynchronize(stream), "gemm");

  std::vector<float> af(a.size()), bf(b.size());
  for (size_t i = 0; i < a.size(); ++i) af[i] = from_bf16(a[i]);
  for (size_t i = 0; i < b.size(); ++i) bf[i] = from_bf16(b[i]);
  std::vector<double> want(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; ++p) sum += double(af[i * k + p]) * bf[j * k + p];
      want[i * n + j] = sum;
    }
  }
  // Near-zero sums: fp32 accumulation of 2048 products of magnitude <= 1 is good to ~1e-4.
  return compare("gemm bf16 [64, 2048] x [7168, 2048]^T", dc.to_host(), want, 1e-2);
}

// A device buffer of `bytes` bytes, freed on scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { check_cuda(cudaMalloc(&ptr, bytes), "cudaMalloc"); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr); }
  void* ptr = nullptr;
};

// MoE dispatch: rows of x grouped by expert. The scratch (per-chunk counts, the copy's work
// list) comes from one workspace whose size <tileaot/ops.hpp> computes from the tensors.
bool run_moe_expand(cudaStream_t stream) {
  const int64_t t = 512, h = 7168, k = 8, e = 256, align = 128, p = t * k + e * (align - 1);
  const auto x = random_bf16(t * h, 5);
  std::mt19937 gen(6);
  std::uniform_int_distribution<int32_t> expert(-1, int32_t(e) - 1);  // -1: a dropped slot
  std::vector<int32_t> idx(t * k);
  for (auto& v : idx) v = expert(gen);
  DeviceArray dx(x), dxs(p * h);
  DeviceBuffer didx(idx.size() * 4), doff((e + 1) * 4), dpos(t * k * 4);
  check_cuda(cudaMemcpy(didx.ptr, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice), "idx");
  using tileaot::DType;
  const tileaot::TensorView tx(dx.get(), {t, h}, DType::kBFloat16),
      ti(didx.ptr, {t, k}, DType::kInt32), txs(dxs.get(), {p, h}, DType::kBFloat16),
      toff(doff.ptr, {e + 1}, DType::kInt32), tpos(dpos.ptr, {t, k}, DType::kInt32);
  const size_t bytes = tileaot::moe_expand_workspace_size(tx, ti, txs, toff, tpos);
  DeviceBuffer workspace(bytes);
  tileaot::moe_expand(stream, tx, ti, txs, toff, tpos, workspace.ptr, bytes, int32_t(align));
  check_cuda(cudaStreamSynchronize(stream), "moe_expand");

  // Host reference: expert groups in order, each padded to `align` rows; inside a group the
  // entries keep their (token, slot) order.
  std::vector<int32_t> off(e + 1), pos(t * k), want_pos(t * k, -1), count(e, 0);
  check_cuda(cudaMemcpy(off.data(), doff.ptr, off.size() * 4, cudaMemcpyDeviceToHost), "off");
  check_cuda(cudaMemcpy(pos.data(), dpos.ptr, pos.size() * 4, cudaMemcpyDeviceToHost), "pos");
  for (int32_t v : idx) {
    if (v >= 0) ++count[v];
  }
  std::vector<int32_t> want_off(e + 1, 0), next(e);
  for (int64_t i = 0; i < e; ++i) {
    want_off[i + 1] = want_off[i] + int32_t((count[i] + align - 1) / align * align);
    next[i] = want_off[i];
  }
  for (int64_t i = 0; i < t * k; ++i) {
    if (idx[i] >= 0) want_pos[i] = next[idx[i]]++;
  }
  const auto xs = dxs.to_host();
  size_t bad_rows = 0;
  for (int64_t i = 0; i < t * k; ++i) {
    if (want_pos[i] < 0) continue;
    const uint16_t* row = xs.data() + int64_t(want_pos[i]) * h;
    if (std::memcmp(row, x.data() + (i / k) * h, h * sizeof(uint16_t)) != 0) ++bad_rows;
  }
  const bool ok = off == want_off && pos == want_pos && bad_rows == 0;
  std::printf(
      "moe_expand bf16 [512, 7168] top-8 of 256 (workspace %zu bytes): offsets %s, positions %s, "
      "%zu rows differ: %s\n",
      bytes, off == want_off ? "equal" : "DIFFER", pos == want_pos ? "equal" : "DIFFER", bad_rows,
      ok ? "PASS" : "FAIL");
  return ok;
}

// The C++ API reports a key this build lacks with an exception that says what is built.
void show_miss() {
  try {
    tileaot::Op("rms_norm", "fp64");
    std::printf("unexpected: rms_norm[fp64] exists\n");
  } catch (const tileaot::VariantMissError& e) {
    const std::string text = e.what();
    std::printf("a missing key throws tileaot::VariantMissError: %s\n",
                text.substr(0, text.find('\n')).c_str());
  }
}

}  // namespace

int main() {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::printf("SKIP: no usable CUDA device (%s; no GPU or no NVIDIA driver here)\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
    return kSkipped;
  }
  try {
    std::printf("tileaot built for %s; device 0 is %s\n", tileaot::build_archs().c_str(),
                tileaot::device_arch(0).c_str());
    cudaStream_t stream = nullptr;
    check_cuda(cudaStreamCreate(&stream), "cudaStreamCreate");
    const bool norm_ok = run_rms_norm(stream);
    const bool gemm_ok = run_gemm(stream);
    const bool expand_ok = run_moe_expand(stream);
    check_cuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
    show_miss();
    const bool ok = norm_ok && gemm_ok && expand_ok;
    std::printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {  // tileaot::Error and CUDA failures alike
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
