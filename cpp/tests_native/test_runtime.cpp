// Native tests of the runtime against registry_fake.cpp. One process per driver situation,
// since driver loading happens once per process:
//   test_runtime nodriver        no libcuda.so.1 on the library path
//   test_runtime fake            LD_LIBRARY_PATH has the fake libcuda.so.1,
//   FAKE_CUDA_SM=8.9,9.0,9.0 test_runtime fake-init-fail  same, with FAKE_CUDA_INIT_FAIL=1
//   FAKE_CUDA_SM=11.0,9.0 test_runtime fake-ptx   the forward path: PTX on a device without SASS
//   test_runtime table 9.0 10.3 ...   prints "9.0 sm_90a" per compute capability: the row the
//                                     arch_table group picks (TILEAOT_PTX applies), or "MISS"
//                                     (tests/test_arch_table.py replays it in Python)
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "blob.h"
#include "fake_cuda.h"
#include "select.h"
#include "tileaot/tileaot.h"

namespace tileaot::detail {  // registry_fake.cpp's compressed blob 2
extern unsigned char kFakeZlibBlob[];
extern const size_t kFakeZlibBlobSize;
}  // namespace tileaot::detail

namespace {

int g_failures = 0;

void expect(bool ok, const char* what, int line, const std::string& detail = "") {
  if (ok) return;
  ++g_failures;
  std::printf("FAIL line %d: %s\n%s\n", line, what, detail.c_str());
}
#define EXPECT(cond) expect((cond), #cond, __LINE__, tileaot_last_error())

bool contains(const std::string& haystack, const char* needle) {
  return haystack.find(needle) != std::string::npos;
}
#define EXPECT_ERROR_HAS(text) EXPECT(contains(tileaot_last_error(), text))

using tileaot::detail::PtxPolicy;
using tileaot::detail::parse_ptx_policy;
using tileaot::detail::select_for_arch;

int32_t rms = -1, rms16 = -1, gemm = -1;
void* const kPtrs[3] = {reinterpret_cast<void*>(0x1000), reinterpret_cast<void*>(0x2000),
                        reinterpret_cast<void*>(0x3000)};
const double kEps[1] = {1e-6};

// Shapes of rms_norm (x[M,N] w[N] y[M,N]) and gemm (a[M,K] b[N,K] c[M,N]).
std::vector<int64_t> rms_shapes(int64_t m, int64_t n) { return {m, n, n, m, n}; }
std::vector<int64_t> gemm_shapes(int64_t m, int64_t n, int64_t k) { return {m, k, n, k, m, n}; }

// Name of the row select_for_arch picks, or "MISS"/"INVALID".
std::string pick(int32_t handle, int major, int minor, const std::vector<int64_t>& shapes) {
  int64_t dyn[tileaot::detail::kMaxDyn];
  int32_t row = -1;
  std::string error;
  int rc = select_for_arch(handle, major, minor, shapes.data(), static_cast<int32_t>(shapes.size()),
                           dyn, &row, &error);
  if (rc == TILEAOT_ERROR_MISS) return "MISS: " + error;
  if (rc != TILEAOT_OK) return "INVALID: " + error;
  return std::string(tileaot_variant_field(row, "name")) + "@" + tileaot_variant_field(row, "arch");
}

int launch_rms(int32_t handle, int device, int64_t m, int64_t n, void* stream = nullptr) {
  std::vector<int64_t> s = rms_shapes(m, n);
  return tileaot_launch(handle, device, stream, kPtrs, 3, s.data(), 5, kEps, 1);
}

// The arch of the arch_table row picked on major.minor under `policy`, or "MISS".
std::string table_pick(int major, int minor, const PtxPolicy& policy, std::string* error) {
  const int32_t h = tileaot_lookup("arch_table", "bf16");
  int64_t dyn[tileaot::detail::kMaxDyn];
  int32_t row = -1;
  const int64_t shapes[1] = {7};
  const int rc = select_for_arch(h, major, minor, shapes, 1, dyn, &row, error, -1, policy);
  if (rc == TILEAOT_ERROR_MISS) return "MISS";
  if (rc != TILEAOT_OK) return "INVALID";
  return tileaot_variant_field(row, "arch");
}

void test_ptx_policy() {
  EXPECT(parse_ptx_policy(nullptr).mode == PtxPolicy::kAuto);
  EXPECT(parse_ptx_policy("auto").mode == PtxPolicy::kAuto);
  EXPECT(parse_ptx_policy("off").mode == PtxPolicy::kOff);
  EXPECT(parse_ptx_policy("prefer").mode == PtxPolicy::kPrefer);
  const PtxPolicy p80 = parse_ptx_policy("prefer:compute_80");
  EXPECT(p80.mode == PtxPolicy::kPrefer && p80.prefer_version == 80 && p80.error.empty());
  EXPECT(parse_ptx_policy("prefer:75").prefer_version == 75);
  EXPECT(contains(parse_ptx_policy("always").error, "TILEAOT_PTX='always' is not one of"));
  EXPECT(!parse_ptx_policy("prefer:x").error.empty());
  std::string error;
  const PtxPolicy autop, off = parse_ptx_policy("off"), prefer = parse_ptx_policy("prefer");
  // SASS first whenever one runs; PTX for what no SASS serves (11.0: Jetson Thor, 13.0: next).
  EXPECT(table_pick(9, 0, autop, &error) == "sm_90a");
  EXPECT(table_pick(10, 3, autop, &error) == "sm_100f");
  EXPECT(table_pick(12, 1, autop, &error) == "sm_120f");
  EXPECT(table_pick(11, 0, autop, &error) == "compute_80");
  EXPECT(table_pick(13, 0, autop, &error) == "compute_80");
  EXPECT(table_pick(6, 1, autop, &error) == "MISS");  // PTX of 8.0 does not JIT for 6.1
  EXPECT(table_pick(11, 0, off, &error) == "MISS");
  EXPECT(contains(error, "TILEAOT_PTX=off keeps its PTX"));
  std::printf("PTX off miss:\n  %s\n", error.c_str());
  EXPECT(table_pick(9, 0, prefer, &error) == "compute_80");
  EXPECT(table_pick(7, 5, prefer, &error) == "sm_75");  // compute_80 cannot run on 7.5
  EXPECT(table_pick(9, 0, parse_ptx_policy("prefer:70"), &error) == "sm_90a");  // no compute_70
  EXPECT(table_pick(9, 0, parse_ptx_policy("bogus"), &error) == "INVALID");
  EXPECT(contains(error, "TILEAOT_PTX='bogus'"));
}

void test_lookup() {
  gemm = tileaot_lookup("gemm", "bf16");
  rms = tileaot_lookup("rms_norm", "bf16");
  rms16 = tileaot_lookup("rms_norm", "fp16");
  EXPECT(gemm == 0 && rms == 3 && rms16 == 7);
  EXPECT(tileaot_lookup("rms_norm", "fp32") == -1);
  EXPECT_ERROR_HAS("rms_norm has no variants for key 'fp32'");
  EXPECT_ERROR_HAS("keys built: bf16, fp16");
  EXPECT_ERROR_HAS("KernelSpec.keys");
  std::printf("lookup key miss:\n  %s\n", tileaot_last_error());
  EXPECT(tileaot_lookup("softmax", "bf16") == -1);
  EXPECT_ERROR_HAS("op 'softmax' is not in this build; ops built: gemm, rms_norm");
  EXPECT_ERROR_HAS("kernels_py/<family>/softmax.py");
  std::printf("lookup op miss:\n  %s\n", tileaot_last_error());
  EXPECT(tileaot_lookup(nullptr, "bf16") == -1);
}

void test_select() {
  EXPECT(pick(rms, 9, 0, rms_shapes(3, 4096)) == "rms_norm_bf16_n4096@sm_90a");
  EXPECT(pick(rms, 9, 0, rms_shapes(3, 1024)) == "rms_norm_bf16_any@sm_90a");
  EXPECT(pick(rms, 8, 9, rms_shapes(3, 4096)) == "rms_norm_bf16_n4096@sm_80");
  EXPECT(pick(rms, 8, 6, rms_shapes(3, 1024)) == "rms_norm_bf16_any@sm_80");
  EXPECT(pick(rms, 8, 0, rms_shapes(1, 8)) == "rms_norm_bf16_any@sm_80");
  // Best arch first, then fall back to a lower compatible arch when nothing there matches.
  EXPECT(pick(rms16, 8, 9, rms_shapes(3, 4096)) == "rms_norm_fp16_n4096@sm_86");
  EXPECT(pick(rms16, 8, 9, rms_shapes(3, 1024)) == "rms_norm_fp16_any@sm_80");
  EXPECT(pick(rms16, 8, 0, rms_shapes(3, 4096)) == "rms_norm_fp16_any@sm_80");
  // "a" before plain at the same major.minor; plain sm_90 alone on a 9.x that is not 9.0.
  EXPECT(pick(gemm, 9, 0, gemm_shapes(128, 128, 256)) == "gemm_bf16_any@sm_90a");
  EXPECT(pick(gemm, 9, 1, gemm_shapes(128, 128, 256)) == "gemm_bf16_any@sm_90");
  EXPECT(pick(gemm, 10, 0, gemm_shapes(128, 128, 256)) == "gemm_bf16_any@sm_100a");

  std::string miss = pick(rms, 9, 0, rms_shapes(3, 1001));
  EXPECT(contains(miss,
                  "MISS: tileaot: no rms_norm[bf16] variant for shapes (3, 1001), (1001,), "
                  "(3, 1001) on sm_90a"));
  EXPECT(contains(miss, "constraint"));
  EXPECT(contains(miss, "rms_norm_bf16_any (sm_90a, sm_80): x[M,N] weight[N] y[M,N]; eps | N%8"));
  std::printf("select shape miss:\n  %s\n", miss.c_str());
  miss = pick(rms, 7, 5, rms_shapes(3, 1024));
  EXPECT(contains(miss, "-Ccmake.define.TILEAOT_ARCHS=\"80,86,90,90a,100a,75\""));
  std::printf("select arch miss:\n  %s\n", miss.c_str());
  miss = pick(rms, 10, 0, rms_shapes(3, 1024));
  EXPECT(contains(miss, "KernelSpec.supports"));
  std::printf("select arch miss (supports):\n  %s\n", miss.c_str());
  miss = pick(gemm, 10, 3, gemm_shapes(128, 128, 256));
  EXPECT(contains(miss, "on sm_103") && contains(miss, ",103\""));
  miss = pick(gemm, 9, 0, gemm_shapes(128, 128, 100));
  EXPECT(contains(miss, "(sm_90a, sm_90)") &&
         contains(miss, "gemm_bf16_any (sm_100a, sm_90a, sm_90)"));

  EXPECT(pick(rms, 9, 0, {3, 4096, 4096}).rfind("INVALID", 0) == 0);
  EXPECT(pick(rms + 1, 9, 0, rms_shapes(3, 4096)).rfind("INVALID", 0) == 0);
  EXPECT(pick(-1, 9, 0, rms_shapes(3, 4096)).rfind("INVALID", 0) == 0);
  EXPECT(pick(99, 9, 0, rms_shapes(3, 4096)).rfind("INVALID", 0) == 0);
}

constexpr const char* kBlob2Text = "sm_90a: rms_norm_bf16_n4096_kernel rms_norm_bf16_any_kernel";

// What BlobImage::open makes of `blob` with inflated size `size` (nullptr: stored): the status,
// and the image as text, or the failure's detail.
std::pair<int, std::string> open_blob(const unsigned char* data, size_t n, const uint64_t* size) {
  using tileaot::detail::BlobImage;
  BlobImage image;
  std::string detail;
  const tileaot::detail::Blob blob{data, n, size, "sm_90a"};
  const BlobImage::Status status = image.open(blob, &detail);
  if (status != BlobImage::kOk) return {status, detail};
  return {status, std::string(static_cast<const char*>(image.data()), image.size())};
}

// Stored blobs are used in place; compressed ones inflate to exactly their recorded size, and
// every kind of damage is a failure with a reason, never a short or overlong image.
void test_blob_images() {
  using tileaot::detail::BlobImage;
  using tileaot::detail::kFakeZlibBlob;
  const size_t n = tileaot::detail::kFakeZlibBlobSize;
  const std::string text(kBlob2Text, std::strlen(kBlob2Text) + 1);  // with its NUL
  const uint64_t right = text.size(), short_size = right - 1, long_size = right + 1;
  const uint64_t zero = 0, huge = uint64_t{1} << 40;
  const auto* stored = reinterpret_cast<const unsigned char*>(kBlob2Text);
  BlobImage image;
  std::string detail;
  EXPECT(image.open({stored, 7, &zero, "sm_90a"}, &detail) == BlobImage::kOk);
  EXPECT(image.data() == stored && image.size() == 7);  // no copy
  EXPECT(open_blob(stored, 7, nullptr) == std::make_pair(0, std::string(kBlob2Text, 7)));
  EXPECT(n < right);  // the test blob is really compressed
  EXPECT(open_blob(kFakeZlibBlob, n, &right) == std::make_pair(0, text));
  auto failed = open_blob(kFakeZlibBlob, n, &short_size);
  EXPECT(failed.first == BlobImage::kCorrupt &&
         failed.second == "it inflates to more than its recorded 59 bytes");
  failed = open_blob(kFakeZlibBlob, n, &long_size);
  EXPECT(failed.first == BlobImage::kCorrupt &&
         failed.second == "it inflates to 60 bytes, not its recorded 61");
  failed = open_blob(kFakeZlibBlob, n - 5, &right);  // truncated stream
  EXPECT(failed.first == BlobImage::kCorrupt && failed.second == "its zlib stream is truncated");
  failed = open_blob(kFakeZlibBlob, n - 4, &right);  // just the checksum missing
  EXPECT(failed.first == BlobImage::kCorrupt && failed.second == "its zlib stream is truncated");
  failed = open_blob(kFakeZlibBlob, n, &huge);
  EXPECT(failed.first == BlobImage::kCorrupt && contains(failed.second, "are not plausible"));
  kFakeZlibBlob[n / 2] ^= 0x5a;
  failed = open_blob(kFakeZlibBlob, n, &right);
  kFakeZlibBlob[n / 2] ^= 0x5a;
  EXPECT(failed.first == BlobImage::kCorrupt &&
         failed.second.rfind("its zlib stream does not inflate (", 0) == 0);  // zlib's reason
}

void test_arch_names() {
  using tileaot::detail::arch_name;
  EXPECT(arch_name(9, 0) == "sm_90a" && arch_name(10, 0) == "sm_100a");
  EXPECT(arch_name(8, 9) == "sm_89" && arch_name(10, 3) == "sm_103" &&
         arch_name(12, 0) == "sm_120");
}

void test_introspection() {
  EXPECT(tileaot_num_variants() == 16);  // 9 rows of gemm and rms_norm, 7 of arch_table
  EXPECT(std::strcmp(tileaot_variant_field(0, "name"), "gemm_bf16_any") == 0);
  EXPECT(std::strcmp(tileaot_variant_field(2, "arch"), "sm_90") == 0);
  EXPECT(std::strcmp(tileaot_variant_field(2, "blob_arch"), "sm_90") == 0);
  EXPECT(std::strcmp(tileaot_variant_field(3, "spec"), "n4096") == 0);
  EXPECT(std::strcmp(tileaot_variant_field(3, "signature"),
                     "x[M,4096] weight[4096] y[M,4096]; eps") == 0);
  EXPECT(tileaot_variant_field(3, "nope") == nullptr);
  EXPECT(tileaot_variant_field(16, "name") == nullptr);
  EXPECT(tileaot_variant_field(-1, "name") == nullptr);
  EXPECT(std::strcmp(tileaot_build_archs(), "sm_80,sm_86,sm_90,sm_90a,sm_100a") == 0);
  EXPECT(std::strcmp(tileaot_build_ops(), "*") == 0);
  const int32_t rms = tileaot_lookup("rms_norm", "bf16");
  EXPECT(tileaot_tensor_ndim(rms, 0) == 2 && tileaot_tensor_ndim(rms, 1) == 1);
  EXPECT(tileaot_tensor_ndim(rms, 2) == 2);
  EXPECT(tileaot_tensor_ndim(rms, 3) == -1);
  EXPECT_ERROR_HAS("has 3 tensors, not tensor 3");
  EXPECT(tileaot_tensor_ndim(rms + 1, 0) == -1);  // a row inside a group is no handle
  EXPECT_ERROR_HAS("invalid handle");
}

// Count and pointer checks come before any driver use, so they hold with or without one.
void test_invalid_args() {
  std::vector<int64_t> s = rms_shapes(3, 4096);
  void* const with_null[3] = {kPtrs[0], nullptr, kPtrs[2]};
  EXPECT(tileaot_launch(rms, 0, nullptr, kPtrs, 2, s.data(), 5, kEps, 1) == TILEAOT_ERROR_INVALID);
  EXPECT_ERROR_HAS("rms_norm[bf16] takes 3 tensors");
  EXPECT(tileaot_launch(rms, 0, nullptr, kPtrs, 3, s.data(), 4, kEps, 1) == TILEAOT_ERROR_INVALID);
  EXPECT_ERROR_HAS("takes 5 shape values");
  EXPECT(tileaot_launch(rms, 0, nullptr, kPtrs, 3, s.data(), 5, kEps, 0) == TILEAOT_ERROR_INVALID);
  EXPECT_ERROR_HAS("takes 1 scalars");
  EXPECT(tileaot_launch(rms, 0, nullptr, with_null, 3, s.data(), 5, kEps, 1) ==
         TILEAOT_ERROR_INVALID);
  EXPECT_ERROR_HAS("tensor 1 has a NULL data pointer");
  EXPECT(tileaot_launch(rms, 0, nullptr, nullptr, 3, s.data(), 5, kEps, 1) ==
         TILEAOT_ERROR_INVALID);
  EXPECT(tileaot_launch(rms, 0, nullptr, kPtrs, 3, nullptr, 5, kEps, 1) != TILEAOT_OK);
  EXPECT(tileaot_launch(4, 0, nullptr, kPtrs, 3, s.data(), 5, kEps, 1) == TILEAOT_ERROR_INVALID);
  EXPECT_ERROR_HAS("invalid handle 4");
}

void test_no_driver() {
  const char* kClear =
      "CUDA driver (libcuda.so.1) not found: tileaot needs an NVIDIA driver to launch kernels; "
      "import and introspection work without one";
  EXPECT(launch_rms(rms, 0, 3, 4096) == TILEAOT_ERROR_DRIVER);
  EXPECT_ERROR_HAS(kClear);
  std::printf("launch without driver:\n  %s\n", tileaot_last_error());
  std::vector<int64_t> s = rms_shapes(3, 4096);
  EXPECT(tileaot_select(rms, 0, s.data(), 5) == nullptr);
  EXPECT_ERROR_HAS(kClear);
  EXPECT(tileaot_device_arch(0) == nullptr);
  EXPECT(launch_rms(rms, 0, 3, 4096) == TILEAOT_ERROR_DRIVER);  // the failure is kept
  // The library stays usable for everything that needs no driver.
  EXPECT(tileaot_lookup("gemm", "bf16") == gemm && tileaot_num_variants() == 16);
  EXPECT(std::strcmp(tileaot_variant_field(3, "name"), "rms_norm_bf16_n4096") == 0);
  EXPECT(tileaot_launch(rms, 0, nullptr, kPtrs, 2, s.data(), 5, kEps, 1) == TILEAOT_ERROR_INVALID);
}

// The fake driver's hooks, found in the copy the runtime loaded (the test does not link it).
void* fake_symbol(const char* name) {
  return dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), name);
}

FakeCudaState* fake() {
  return reinterpret_cast<FakeCudaState* (*)()>(fake_symbol("fake_cuda_state"))();
}

void* fake_primary_ctx(int device) {
  return reinterpret_cast<void* (*)(int)>(fake_symbol("fake_cuda_primary_ctx"))(device);
}

void test_fake_basics(FakeCudaState* st) {
  EXPECT(std::string(tileaot_device_arch(0)) == "sm_89");
  EXPECT(std::string(tileaot_device_arch(1)) == "sm_90a");
  EXPECT(std::string(tileaot_device_arch(2)) == "sm_90a");
  EXPECT(tileaot_device_arch(3) == nullptr);
  EXPECT_ERROR_HAS("no CUDA device 3 (3 visible");
  std::vector<int64_t> s = rms_shapes(3, 4096);
  EXPECT(std::string(tileaot_select(rms, 0, s.data(), 5)) == "rms_norm_bf16_n4096");
  EXPECT(std::string(tileaot_select(rms, 1, s.data(), 5)) == "rms_norm_bf16_n4096");
  EXPECT(st->init_calls == 1 && st->retains == 0);  // selecting needs no context

  void* stream = reinterpret_cast<void*>(0x5150);
  EXPECT(launch_rms(rms, 0, 3, 4096, stream) == TILEAOT_OK);
  EXPECT(st->n_launches == 1 && st->module_loads == 1 && st->get_functions == 1);
  const FakeLaunch& l = st->launches[0];
  EXPECT(l.grid[0] == 3 && l.block[0] == 128 && l.smem == 0 && l.stream == stream);
  EXPECT(l.n_attrs == 1 && l.attr_ids[0] == 6 && l.pdl == 1);
  EXPECT(st->pushes == 1 && st->pops == 1 && st->retains == 1);
  EXPECT(launch_rms(rms, 0, 5, 4096) == TILEAOT_OK);  // cached: no new load or lookup
  EXPECT(st->module_loads == 1 && st->get_functions == 1 && st->retains == 1);
  EXPECT(launch_rms(rms, 0, 5, 1024) == TILEAOT_OK);  // other kernel, same blob
  EXPECT(st->module_loads == 1 && st->get_functions == 2);
  EXPECT(launch_rms(rms, 1, 5, 1024) == TILEAOT_OK);  // other device: its own context + module
  EXPECT(st->module_loads == 2 && st->retains == 2);
  // That module is blob 2, stored zlib-compressed: the driver got the inflated text.
  EXPECT(std::string(st->last_image) == kBlob2Text &&
         st->last_image_size == static_cast<int>(std::strlen(kBlob2Text)));
  EXPECT(st->launches[3].ctx == fake_primary_ctx(1));
}

void test_fake_context_already_current(FakeCudaState* st) {
  auto push = reinterpret_cast<int (*)(void*)>(fake_symbol("cuCtxPushCurrent_v2"));
  auto pop = reinterpret_cast<int (*)(void**)>(fake_symbol("cuCtxPopCurrent_v2"));
  push(fake_primary_ctx(0));
  const int pushes = st->pushes;
  EXPECT(launch_rms(rms, 0, 3, 4096) == TILEAOT_OK);
  EXPECT(st->pushes == pushes);  // already current: no push
  EXPECT(launch_rms(rms, 1, 3, 4096) == TILEAOT_OK);
  EXPECT(st->pushes == pushes + 1 && st->launches[st->n_launches - 1].ctx == fake_primary_ctx(1));
  void* ctx = nullptr;
  pop(&ctx);
  EXPECT(ctx == fake_primary_ctx(0));  // the caller's context is back on top
}

void test_fake_gemm(FakeCudaState* st) {
  std::vector<int64_t> s = gemm_shapes(256, 256, 512);
  void* const ptrs[3] = {kPtrs[0], kPtrs[1], kPtrs[2]};
  const int before = st->n_launches;
  EXPECT(tileaot_launch(gemm, 1, nullptr, ptrs, 3, s.data(), 6, nullptr, 0) == TILEAOT_OK);
  EXPECT(st->n_launches == before + 2 && st->encodes == 1 && st->last_encode_rank == 2);
  EXPECT(st->set_attrs == 1 && st->last_set_attr_value == 196608);
  const FakeLaunch& main = st->launches[before];
  EXPECT(main.smem == 196608 && main.n_attrs == 3 && main.pdl == 1 && main.cooperative == 1);
  EXPECT(main.cluster[0] == 2 && main.cluster[1] == 1 && main.cluster[2] == 1);
  EXPECT(st->launches[before + 1].n_attrs == 0);
  EXPECT(tileaot_launch(gemm, 1, nullptr, ptrs, 3, s.data(), 6, nullptr, 0) == TILEAOT_OK);
  EXPECT(st->set_attrs == 1);  // the shared-memory opt-in happens once
  EXPECT(tileaot_launch(gemm, 0, nullptr, ptrs, 3, s.data(), 6, nullptr, 0) == TILEAOT_ERROR_MISS);
  EXPECT_ERROR_HAS("on device 0 (sm_89)");
  std::printf("gemm on sm_89:\n  %s\n", tileaot_last_error());
  EXPECT(launch_rms(rms, 0, 3, 4096) == TILEAOT_OK);  // a device without a variant stays usable
}

void test_fake_launch_failure(FakeCudaState* st) {
  st->fail_launch = 701;
  const int pops = st->pops;
  EXPECT(launch_rms(rms, 0, 3, 4096) == TILEAOT_ERROR_DRIVER);
  EXPECT(std::string(tileaot_last_error()) ==
         "tileaot: rms_norm variant rms_norm_bf16_n4096 (sm_80) on device 0 (sm_89): "
         "cuLaunchKernelEx failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: too many resources "
         "requested for launch (kernel rms_norm_bf16_n4096_kernel, grid (3, 1, 1), "
         "block (128, 1, 1), smem 0)");
  EXPECT(st->pops == pops + 1);  // context popped on the error path too
  std::printf("launch failure:\n  %s\n", tileaot_last_error());
  st->fail_launch = 0;
  EXPECT(launch_rms(rms, 0, 3, 4096) == TILEAOT_OK);
}

// Many threads racing on rows nobody has used: each blob loads exactly once.
void test_fake_threads(FakeCudaState* st) {
  const int loads = st->module_loads;
  std::vector<std::thread> threads;
  std::vector<int> results(16, -1);
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([t, &results] {
      int rc = 0;
      for (int i = 0; i < 200 && rc == 0; ++i) rc = launch_rms(rms16, 0, 1 + i, t % 2 ? 4096 : 64);
      results[t] = rc;
    });
  }
  for (std::thread& th : threads) th.join();
  for (int rc : results) EXPECT(rc == TILEAOT_OK);
  EXPECT(st->module_loads == loads + 2);  // sm_86 (n4096) and sm_80 (any) blobs
  EXPECT(st->pushes == st->pops);
}

// A failed module load (out of memory, no image for the GPU) is reported with the blob's arch
// and not cached: the next call retries, and works.
void test_fake_module_failure(FakeCudaState* st) {
  st->fail_module_load = 2;
  EXPECT(launch_rms(rms, 2, 3, 4096) == TILEAOT_ERROR_DRIVER);
  EXPECT_ERROR_HAS("cuModuleLoadData failed: CUDA_ERROR_OUT_OF_MEMORY");
  st->fail_module_load = 209;
  EXPECT(launch_rms(rms, 2, 3, 4096) == TILEAOT_ERROR_DRIVER);
  EXPECT(std::string(tileaot_last_error()) ==
         "tileaot: rms_norm variant rms_norm_bf16_n4096 (sm_90a) on device 2 (sm_90a): "
         "cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU: no kernel image is available "
         "for execution on the device (cubin compiled for sm_90a)");
  std::printf("module load failure:\n  %s\n", tileaot_last_error());
  st->fail_module_load = 0;
  EXPECT(launch_rms(rms, 2, 3, 4096) == TILEAOT_OK);
}

// A compressed blob that does not inflate (a damaged library) fails like a module load the
// driver refused, before any driver call, and is not cached: once intact, it loads.
void test_fake_corrupt_blob(FakeCudaState* st) {
  const int loads = st->module_loads;
  unsigned char& byte = tileaot::detail::kFakeZlibBlob[tileaot::detail::kFakeZlibBlobSize / 2];
  byte ^= 0x5a;
  EXPECT(launch_rms(rms, 2, 3, 4096) == TILEAOT_ERROR_DRIVER);
  // zlib's own reason ("incorrect data check" here) sits between the two fixed parts.
  const std::string error = tileaot_last_error();
  EXPECT(error.rfind("tileaot: rms_norm variant rms_norm_bf16_n4096 (sm_90a) on device 2 (sm_90a): "
                     "inflating the embedded cubin failed: CUDA_ERROR_INVALID_IMAGE: device kernel "
                     "image is invalid (cubin compiled for sm_90a: its zlib stream does not "
                     "inflate (",
                     0) == 0);
  EXPECT(contains(error, "); the library is damaged: reinstall tileaot)"));
  std::printf("corrupt blob:\n  %s\n", tileaot_last_error());
  EXPECT(st->module_loads == loads);
  byte ^= 0x5a;
}

void* stream_of(int device) { return reinterpret_cast<void*>(uintptr_t{0x1000} + device); }

// Runs fn(t) on `n` threads released together (each spins until all have started).
template <typename Fn>
void run_together(int n, Fn fn) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([t, n, &ready, &fn] {
      ready.fetch_add(1);
      while (ready.load() < n) std::this_thread::yield();
      fn(t);
    });
  }
  for (std::thread& th : threads) th.join();
}

// Eight threads released together on a variant no call has used on this device, its module load
// slowed down so that all of them arrive while it runs: one load, one lookup per kernel, one
// shared-memory opt-in, and every launch done in the device's own context.
void test_fake_first_load_race(FakeCudaState* st) {
  const int loads = st->module_loads, lookups = st->get_functions, attrs = st->set_attrs;
  const int before = st->n_launches;
  std::vector<int64_t> s = gemm_shapes(256, 256, 512);
  std::vector<int> rc(8, -1);
  st->load_delay_us = 20000;
  run_together(8, [&](int t) {
    rc[t] = tileaot_launch(gemm, 2, stream_of(2), kPtrs, 3, s.data(), 6, nullptr, 0);
  });
  st->load_delay_us = 0;
  for (int r : rc) EXPECT(r == TILEAOT_OK);
  EXPECT(st->module_loads == loads + 1 && st->get_functions == lookups + 2);
  EXPECT(st->set_attrs == attrs + 1 && st->n_launches == before + 16);
  for (int i = before; i < st->n_launches; ++i) {
    EXPECT(st->launches[i % 256].ctx == fake_primary_ctx(2));
  }
}

// Threads launching on two devices at once: each launch runs in the context of the device it
// named (the stream tells which), with that device's functions (the fake refuses others).
void test_fake_two_devices_at_once(FakeCudaState* st) {
  const int before = st->n_launches;
  std::vector<int> failures(8, 0);
  run_together(8, [&](int t) {
    for (int i = 0; i < 25; ++i) {
      const int device = (t + i) % 2;
      failures[t] += launch_rms(rms, device, 1 + i, 1024, stream_of(device)) != TILEAOT_OK;
    }
  });
  for (int f : failures) EXPECT(f == 0);
  EXPECT(st->n_launches == before + 200 && st->pushes == st->pops);
  for (int i = before; i < st->n_launches; ++i) {
    const FakeLaunch& l = st->launches[i % 256];
    EXPECT(l.ctx ==
           fake_primary_ctx(static_cast<int>(reinterpret_cast<uintptr_t>(l.stream) - 0x1000)));
  }
}

// Host cost of one launch through the C ABI (selection, cache lookups, fake driver call).
void report_launch_cost() {
  const int n = 1000000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) launch_rms(rms, 0, 3, 4096);
  const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
  std::printf("C ABI launch via fake driver: %.3f us/call\n", dt.count() / n);
}

}  // namespace

// The forward path through the fake driver: device 0 is 11.0 (no SASS of the build runs),
// device 1 is 9.0.
void test_fake_ptx(FakeCudaState* st) {
  const int32_t h = tileaot_lookup("arch_table", "bf16");
  void* const ptrs[1] = {reinterpret_cast<void*>(0x1000)};
  const int64_t shapes[1] = {7};
  EXPECT(std::string(tileaot_select(h, 0, shapes, 1)) == "arch_table_any");
  EXPECT(tileaot::detail::ptx_warning_count() == 0);
  EXPECT(tileaot_launch(h, 0, nullptr, ptrs, 1, shapes, 1, nullptr, 0) == TILEAOT_OK);
  EXPECT(st->ptx_loads == 1 && std::strncmp(st->last_image, "//", 2) == 0);
  EXPECT(tileaot::detail::ptx_warning_count() == 1);
  EXPECT(tileaot_launch(h, 0, nullptr, ptrs, 1, shapes, 1, nullptr, 0) == TILEAOT_OK);
  EXPECT(tileaot::detail::ptx_warning_count() == 1);  // once per op+key and process
  EXPECT(st->ptx_loads == 1);                         // the module is cached
  const int loads = st->module_loads;
  EXPECT(tileaot_launch(h, 1, nullptr, ptrs, 1, shapes, 1, nullptr, 0) == TILEAOT_OK);
  EXPECT(st->module_loads == loads + 1 && st->ptx_loads == 1);  // 9.0: the sm_90a cubin
  EXPECT(std::string(st->last_image).rfind("sm_90a:", 0) == 0);
  const std::string w = tileaot::detail::ptx_warning(tileaot::detail::kVariants[h + 6], 0,
                                                     "sm_110");
  EXPECT(contains(w, "arch_table[bf16] runs PTX (compute_80) on device 0 (sm_110)") &&
         contains(w, "JIT-compiles") && contains(w, "TILEAOT_PTX=off"));
  std::printf("PTX warning:\n  %s\n", w.c_str());
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "nodriver";
  if (mode == "table") {
    const PtxPolicy policy = parse_ptx_policy(std::getenv("TILEAOT_PTX"));
    for (int i = 2; i < argc; ++i) {
      int major = 0, minor = 0;
      if (std::sscanf(argv[i], "%d.%d", &major, &minor) != 2) return 2;
      std::string error;
      std::printf("%s %s\n", argv[i], table_pick(major, minor, policy, &error).c_str());
    }
    return 0;
  }
  test_lookup();
  test_ptx_policy();
  test_arch_names();
  test_select();
  test_introspection();
  test_invalid_args();
  test_blob_images();
  if (mode == "nodriver") {
    test_no_driver();
  } else if (mode == "fake") {
    FakeCudaState* st = fake();
    test_fake_basics(st);
    test_fake_context_already_current(st);
    test_fake_gemm(st);
    test_fake_launch_failure(st);
    test_fake_threads(st);
    test_fake_first_load_race(st);
    test_fake_two_devices_at_once(st);
    test_fake_corrupt_blob(st);
    test_fake_module_failure(st);  // its last launch loads blob 2 on device 2: the retry works
    report_launch_cost();
  } else if (mode == "fake-ptx") {
    test_fake_ptx(fake());
  } else if (mode == "fake-init-fail") {
    EXPECT(launch_rms(rms, 0, 3, 4096) == TILEAOT_ERROR_DRIVER);
    EXPECT_ERROR_HAS("tileaot: cuInit failed: CUDA_ERROR_NO_DEVICE: no CUDA-capable device");
    std::printf("cuInit failure:\n  %s\n", tileaot_last_error());
  }
  std::printf("%s: %s (%d failures)\n", mode.c_str(), g_failures ? "FAILED" : "ok", g_failures);
  return g_failures ? 1 : 0;
}
