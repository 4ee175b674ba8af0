// A hand-written stand-in for the generated <build>/gen/registry.cpp: two ops, several archs,
// specialised and generic rows, one TMA/cluster/cooperative kernel. Blobs are not cubins: the
// fake driver (fake_cuda.cpp) reads them as a text list of the kernel names they "contain".
// Blob 2 is stored zlib-compressed, as build_tools/blob.py packs a cubin: the fakes find its
// kernels only if the runtime inflates it; tests corrupt it through kFakeZlibBlob.
#include "registry.h"

namespace tileaot::detail {
namespace {

// rms_norm: x[M,N] weight[N] y[M,N]; eps.
const int32_t kRmsNdims[] = {2, 1, 2};

// Generic: N dynamic, N % 8 == 0; dyn = {M, N}.
bool match_rms_any(const int64_t* s, int64_t* dyn) {
  const int64_t m = s[0], n = s[1];
  if (s[2] != n || s[3] != m || s[4] != n || n % 8 != 0) return false;
  dyn[0] = m;
  dyn[1] = n;
  return true;
}

// Specialised on N = 4096; dyn = {M}.
bool match_rms_n4096(const int64_t* s, int64_t* dyn) {
  if (s[1] != 4096 || s[2] != 4096 || s[3] != s[0] || s[4] != 4096) return false;
  dyn[0] = s[0];
  return true;
}

int launch_rms(Launcher& l, const CallArgs& a, int64_t n) {
  void* x = a.ptrs[0];
  void* w = a.ptrs[1];
  void* y = a.ptrs[2];
  int32_t m = static_cast<int32_t>(a.dyn[0]);
  int32_t n32 = static_cast<int32_t>(n);
  float eps = static_cast<float>(a.scalars[0]);
  void* args[] = {&x, &w, &y, &m, &n32, &eps};
  const LaunchDims dims = {{static_cast<uint32_t>(m), 1, 1}, {128, 1, 1}, 0};
  const uint32_t cluster[3] = {1, 1, 1};
  return l.launch(0, dims, args, kLaunchPdl, cluster);
}

int launch_rms_any(Launcher& l, const CallArgs& a) { return launch_rms(l, a, a.dyn[1]); }
int launch_rms_n4096(Launcher& l, const CallArgs& a) { return launch_rms(l, a, 4096); }

// gemm: a[M,K] b[N,K] c[M,N]; no scalars; K % 64 == 0; dyn = {M, N, K}.
const int32_t kGemmNdims[] = {2, 2, 2};

bool match_gemm(const int64_t* s, int64_t* dyn) {
  const int64_t m = s[0], k = s[1], n = s[2];
  if (s[3] != k || s[4] != m || s[5] != n || k % 64 != 0) return false;
  dyn[0] = m;
  dyn[1] = n;
  dyn[2] = k;
  return true;
}

int launch_gemm(Launcher& l, const CallArgs& a) {
  TensorMap a_desc;
  const uint64_t dims[2] = {static_cast<uint64_t>(a.dyn[2]), static_cast<uint64_t>(a.dyn[0])};
  const uint64_t strides[1] = {static_cast<uint64_t>(a.dyn[2]) * 2};
  const uint32_t box[2] = {64, 128};
  const uint32_t elem_strides[2] = {1, 1};
  if (int rc =
          l.encode_tiled(&a_desc, 9, 2, a.ptrs[0], dims, strides, box, elem_strides, 0, 3, 2, 0)) {
    return rc;
  }
  void* b = a.ptrs[1];
  void* c = a.ptrs[2];
  void* args[] = {&a_desc, &b, &c};
  const LaunchDims dims_main = {{8, 8, 1}, {384, 1, 1}, 196608};
  const uint32_t cluster[3] = {2, 1, 1};
  if (int rc = l.launch(0, dims_main, args, kLaunchPdl | kLaunchCooperative, cluster)) return rc;
  const LaunchDims dims_tail = {{1, 1, 1}, {32, 1, 1}, 0};
  return l.launch(1, dims_tail, args, 0, nullptr);
}

const char* const kRmsAnyKernels[] = {"rms_norm_bf16_any_kernel"};
const char* const kRmsN4096Kernels[] = {"rms_norm_bf16_n4096_kernel"};
const char* const kRmsFp16Kernels[] = {"rms_norm_fp16_any_kernel"};
const char* const kRmsFp16N4096Kernels[] = {"rms_norm_fp16_n4096_kernel"};
const char* const kGemmKernels[] = {"gemm_bf16_any_kernel", "gemm_bf16_any_tail_kernel"};
const char* const kRmsNames[] = {"x", "weight", "y"};
const char* const kGemmNames[] = {"a", "b", "c"};
constexpr uint32_t kBf16 = 4u | 16u << 8 | 1u << 16;  // DLPack dtypes, as emit_cpp.py packs them
constexpr uint32_t kFp16 = 2u | 16u << 8 | 1u << 16;
const uint32_t kBf16x3[] = {kBf16, kBf16, kBf16};
const uint32_t kFp16x3[] = {kFp16, kFp16, kFp16};

const char kBlob0[] = "sm_90a: gemm_bf16_any_kernel gemm_bf16_any_tail_kernel";
const char kBlob1[] = "sm_90: gemm_bf16_any_kernel gemm_bf16_any_tail_kernel";
const char kBlob3[] = "sm_80: rms_norm_bf16_n4096_kernel rms_norm_bf16_any_kernel";
const char kBlob4[] = "sm_80: rms_norm_fp16_any_kernel";
const char kBlob5[] = "sm_86: rms_norm_fp16_n4096_kernel";

// arch_table: x[M], one row per default target of kernels_py/spec.py plus the forward path's
// PTX (compute_80), for the GPU table test (tests/test_arch_table.py: the same rows through
// python/tileaot/_manifest.py must pick the same row for every GPU).
const int32_t kTableNdims[] = {1};
bool match_table(const int64_t* s, int64_t* dyn) {
  dyn[0] = s[0];
  return true;
}
int launch_table(Launcher& l, const CallArgs& a) {
  void* x = a.ptrs[0];
  void* args[] = {&x};
  const LaunchDims dims = {{1, 1, 1}, {32, 1, 1}, 0};
  const uint32_t cluster[3] = {1, 1, 1};
  return l.launch(0, dims, args, 0, cluster);
}
const char* const kTableKernels[] = {"arch_table_kernel"};
const char* const kTableNames[] = {"x"};
const uint32_t kBf16x1[] = {kBf16};
const char kBlob6[] = "sm_120: arch_table_kernel";
const char kBlob7[] = "sm_100: arch_table_kernel";
const char kBlob8[] = "sm_90a: arch_table_kernel";
const char kBlob9[] = "sm_80: arch_table_kernel";
const char kBlob10[] = "sm_75: arch_table_kernel";
const char kBlob11[] = "sm_70: arch_table_kernel";
// PTX as NVRTC writes it (the fake driver reads `.target` and the `.entry` names).
const char kBlob12[] =
    "//\n// Generated by NVIDIA NVVM Compiler\n.version 8.8\n.target sm_80\n"
    ".address_size 64\n.visible .entry arch_table_kernel(\n)\n{\n ret;\n}\n";

const uint64_t kBlob2InflatedSize = 60;  // the text below, with its NUL

}  // namespace

// Blob 2: zlib.compress(b"sm_90a: rms_norm_bf16_n4096_kernel rms_norm_bf16_any_kernel\0", 9).
// Not const: test_runtime.cpp corrupts a byte to see the failure a damaged library gives.
unsigned char kFakeZlibBlob[] = {
    0x78, 0xda, 0x2b, 0xce, 0x8d, 0xb7, 0x34, 0x48, 0xb4, 0x52, 0x28, 0xca, 0x2d,
    0x8e, 0xcf, 0xcb, 0x2f, 0xca, 0x8d, 0x4f, 0x4a, 0x33, 0x34, 0x8b, 0xcf, 0x33,
    0x31, 0xb0, 0x34, 0x8b, 0xcf, 0x4e, 0x2d, 0xca, 0x4b, 0xcd, 0x41, 0x93, 0x4a,
    0xcc, 0xab, 0x84, 0x4a, 0x30, 0x00, 0x00, 0x87, 0x1c, 0x15, 0x81,
};
extern const size_t kFakeZlibBlobSize = sizeof(kFakeZlibBlob);

namespace {

constexpr const char* kRmsAnySig = "x[M,N] weight[N] y[M,N]; eps | N%8";
constexpr const char* kRmsN4096Sig = "x[M,4096] weight[4096] y[M,4096]; eps";
constexpr const char* kGemmSig = "a[M,K] b[N,K] c[M,N] | K%64";

}  // namespace

// Sorted by (op, key, specialised-before-generic, arch descending), as emit_cpp.py sorts.
const Variant kVariants[] = {
    {"gemm_bf16_any",
     "gemm",
     "bf16",
     "any",
     "sm_100a",
     10,
     0,
     kArchSpecific,
     0,
     3,
     kGemmNdims,
     0,
     3,
     kGemmSig,
     match_gemm,
     2,
     kGemmKernels,
     launch_gemm,
     kGemmNames,
     kBf16x3},
    {"gemm_bf16_any",
     "gemm",
     "bf16",
     "any",
     "sm_90a",
     9,
     0,
     kArchSpecific,
     0,
     3,
     kGemmNdims,
     0,
     3,
     kGemmSig,
     match_gemm,
     2,
     kGemmKernels,
     launch_gemm,
     kGemmNames,
     kBf16x3},
    {"gemm_bf16_any",
     "gemm",
     "bf16",
     "any",
     "sm_90",
     9,
     0,
     kArchPlain,
     1,
     3,
     kGemmNdims,
     0,
     3,
     kGemmSig,
     match_gemm,
     2,
     kGemmKernels,
     launch_gemm,
     kGemmNames,
     kBf16x3},
    {"rms_norm_bf16_n4096",
     "rms_norm",
     "bf16",
     "n4096",
     "sm_90a",
     9,
     0,
     kArchSpecific,
     2,
     3,
     kRmsNdims,
     1,
     1,
     kRmsN4096Sig,
     match_rms_n4096,
     1,
     kRmsN4096Kernels,
     launch_rms_n4096,
     kRmsNames,
     kBf16x3},
    {"rms_norm_bf16_n4096",
     "rms_norm",
     "bf16",
     "n4096",
     "sm_80",
     8,
     0,
     kArchPlain,
     3,
     3,
     kRmsNdims,
     1,
     1,
     kRmsN4096Sig,
     match_rms_n4096,
     1,
     kRmsN4096Kernels,
     launch_rms_n4096,
     kRmsNames,
     kBf16x3},
    {"rms_norm_bf16_any",
     "rms_norm",
     "bf16",
     "any",
     "sm_90a",
     9,
     0,
     kArchSpecific,
     2,
     3,
     kRmsNdims,
     1,
     2,
     kRmsAnySig,
     match_rms_any,
     1,
     kRmsAnyKernels,
     launch_rms_any,
     kRmsNames,
     kBf16x3},
    {"rms_norm_bf16_any",
     "rms_norm",
     "bf16",
     "any",
     "sm_80",
     8,
     0,
     kArchPlain,
     3,
     3,
     kRmsNdims,
     1,
     2,
     kRmsAnySig,
     match_rms_any,
     1,
     kRmsAnyKernels,
     launch_rms_any,
     kRmsNames,
     kBf16x3},
    // fp16: a specialised row only for sm_86, so an 8.9 device falls back to sm_80 for N != 4096.
    {"rms_norm_fp16_n4096",
     "rms_norm",
     "fp16",
     "n4096",
     "sm_86",
     8,
     6,
     kArchPlain,
     5,
     3,
     kRmsNdims,
     1,
     1,
     kRmsN4096Sig,
     match_rms_n4096,
     1,
     kRmsFp16N4096Kernels,
     launch_rms_n4096,
     kRmsNames,
     kFp16x3},
    {"rms_norm_fp16_any",
     "rms_norm",
     "fp16",
     "any",
     "sm_80",
     8,
     0,
     kArchPlain,
     4,
     3,
     kRmsNdims,
     1,
     2,
     kRmsAnySig,
     match_rms_any,
     1,
     kRmsFp16Kernels,
     launch_rms_any,
     kRmsNames,
     kFp16x3},
    {"arch_table_any",
     "arch_table",
     "bf16",
     "any",
     "sm_120f",
     12,
     0,
     kArchFamily,
     6,
     1,
     kTableNdims,
     0,
     1,
     "x[M]",
     match_table,
     1,
     kTableKernels,
     launch_table,
     kTableNames,
     kBf16x1},
    {"arch_table_any",
     "arch_table",
     "bf16",
     "any",
     "sm_100f",
     10,
     0,
     kArchFamily,
     7,
     1,
     kTableNdims,
     0,
     1,
     "x[M]",
     match_table,
     1,
     kTableKernels,
     launch_table,
     kTableNames,
     kBf16x1},
    {"arch_table_any",
     "arch_table",
     "bf16",
     "any",
     "sm_90a",
     9,
     0,
     kArchSpecific,
     8,
     1,
     kTableNdims,
     0,
     1,
     "x[M]",
     match_table,
     1,
     kTableKernels,
     launch_table,
     kTableNames,
     kBf16x1},
    {"arch_table_any",
     "arch_table",
     "bf16",
     "any",
     "sm_80",
     8,
     0,
     kArchPlain,
     9,
     1,
     kTableNdims,
     0,
     1,
     "x[M]",
     match_table,
     1,
     kTableKernels,
     launch_table,
     kTableNames,
     kBf16x1},
    {"arch_table_any",
     "arch_table",
     "bf16",
     "any",
     "sm_75",
     7,
     5,
     kArchPlain,
     10,
     1,
     kTableNdims,
     0,
     1,
     "x[M]",
     match_table,
     1,
     kTableKernels,
     launch_table,
     kTableNames,
     kBf16x1},
    {"arch_table_any",
     "arch_table",
     "bf16",
     "any",
     "sm_70",
     7,
     0,
     kArchPlain,
     11,
     1,
     kTableNdims,
     0,
     1,
     "x[M]",
     match_table,
     1,
     kTableKernels,
     launch_table,
     kTableNames,
     kBf16x1},
    {"arch_table_any",
     "arch_table",
     "bf16",
     "any",
     "compute_80",
     8,
     0,
     kArchPtx,
     12,
     1,
     kTableNdims,
     0,
     1,
     "x[M]",
     match_table,
     1,
     kTableKernels,
     launch_table,
     kTableNames,
     kBf16x1},
};
const int32_t kNumVariants = sizeof(kVariants) / sizeof(kVariants[0]);

const Blob kBlobs[] = {
    {reinterpret_cast<const unsigned char*>(kBlob0), sizeof(kBlob0), nullptr, "sm_90a"},
    {reinterpret_cast<const unsigned char*>(kBlob1), sizeof(kBlob1), nullptr, "sm_90"},
    {kFakeZlibBlob, sizeof(kFakeZlibBlob), &kBlob2InflatedSize, "sm_90a"},
    {reinterpret_cast<const unsigned char*>(kBlob3), sizeof(kBlob3), nullptr, "sm_80"},
    {reinterpret_cast<const unsigned char*>(kBlob4), sizeof(kBlob4), nullptr, "sm_80"},
    {reinterpret_cast<const unsigned char*>(kBlob5), sizeof(kBlob5), nullptr, "sm_86"},
    {reinterpret_cast<const unsigned char*>(kBlob6), sizeof(kBlob6), nullptr, "sm_120f"},
    {reinterpret_cast<const unsigned char*>(kBlob7), sizeof(kBlob7), nullptr, "sm_100f"},
    {reinterpret_cast<const unsigned char*>(kBlob8), sizeof(kBlob8), nullptr, "sm_90a"},
    {reinterpret_cast<const unsigned char*>(kBlob9), sizeof(kBlob9), nullptr, "sm_80"},
    {reinterpret_cast<const unsigned char*>(kBlob10), sizeof(kBlob10), nullptr, "sm_75"},
    {reinterpret_cast<const unsigned char*>(kBlob11), sizeof(kBlob11), nullptr, "sm_70"},
    {reinterpret_cast<const unsigned char*>(kBlob12), sizeof(kBlob12), nullptr, "compute_80"},
};
const int32_t kNumBlobs = sizeof(kBlobs) / sizeof(kBlobs[0]);

const char* const kBuildArchs = "sm_80,sm_86,sm_90,sm_90a,sm_100a";
const char* const kBuildOps = "*";

}  // namespace tileaot::detail
