// The contract between generated code (build_tools/emit_cpp.py) and the runtime.
//
// build_tools writes <build>/gen/registry.cpp, which defines kVariants/kBlobs below and one
// launch function per (variant, arch). The runtime owns everything else: driver loading,
// module cache, variant selection, error text. Nothing here needs CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tileaot::detail {

// One embedded cubin, loaded with cuModuleLoadData: stored as is (ELF), or as its zlib stream
// when that is smaller (build_tools/blob.py packs it; blob.h inflates it before the load).
struct Blob {
  const unsigned char* data;  // the cubin, or its zlib stream
  size_t size;                // bytes at `data`
  // The cubin's size once inflated, or 0 when `data` is the cubin itself (nullptr: 0). A pointer
  // because the build packs each cubin after registry.cpp is generated: the value is the blob
  // file's header, embedded next to the payload (cmake/TileaotCubins.cmake).
  const uint64_t* inflated_size;
  const char* compiled_arch;  // "sm_80": the arch the cubin's SASS is for; "compute_80": PTX
};

// What a row's code is (kernels_py/spec.py, python/tileaot/_arch.py: NVIDIA's target kinds).
enum ArchKind : uint8_t {
  kArchPlain = 0,     // sm_80: SASS for its major, any minor at or above its own
  kArchFamily = 1,    // sm_100f: the same rule, may use the family's common features
  kArchSpecific = 2,  // sm_90a: SASS for exactly its major.minor
  kArchPtx = 3,       // compute_80: PTX the driver JIT-compiles for any device of 8.0 or newer
};

// Generated per variant: checks the concatenated tensor shapes against the variant's
// patterns (static dims, consistent dynamic sizes, derived dims such as N/128, divisibility
// constraints) and, on a match, writes the dynamic sizes to `dyn`. Never launches anything.
using MatchFn = bool (*)(const int64_t* shapes, int64_t* dyn);

// What a call passed, matched against the variant's patterns.
struct CallArgs {
  void* const* ptrs;      // one device pointer per tensor, in parameter order
  const int64_t* dyn;     // dynamic variable values, in the variant's order
  const double* scalars;  // one per runtime scalar, in parameter order
};

// CUtensorMap is an opaque 128-byte, 64-byte-aligned struct passed by value.
struct alignas(64) TensorMap {
  uint64_t opaque[16];
};

// Launch geometry of one kernel for one call, computed by generated code.
struct LaunchDims {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t smem;  // dynamic shared memory bytes
};

enum LaunchFlags : uint32_t {
  kLaunchPdl = 1u << 0,          // programmatic stream serialisation (kernel uses griddepcontrol)
  kLaunchCooperative = 1u << 1,  // cooperative launch
};

// Runtime services for generated launch functions (implemented in runtime.cpp).
class Launcher {
 public:
  virtual ~Launcher() = default;
  // Launch kernel number `kernel` of the current variant; `args` as for cuLaunchKernelEx.
  // `cluster` is {1,1,1} unless TileLang set cluster dims. Returns 0 or a CUresult.
  virtual int launch(int kernel, const LaunchDims& dims, void** args, uint32_t flags,
                     const uint32_t cluster[3]) = 0;
  // cuTensorMapEncodeTiled with TileLang's arguments; strides exclude the innermost one.
  virtual int encode_tiled(TensorMap* map, int dtype, uint32_t rank, void* address,
                           const uint64_t* dims, const uint64_t* strides, const uint32_t* box,
                           const uint32_t* elem_strides, int interleave, int swizzle,
                           int l2_promotion, int oob_fill) = 0;
};

using LaunchFn = int (*)(Launcher& launcher, const CallArgs& args);

constexpr int kMaxDyn = 16;
constexpr int kMaxTensors = 16;

struct Variant {
  const char* name;  // "rms_norm_bf16_n4096": registry key, symbol prefix, filter glob
  const char* op;    // "rms_norm"
  const char* key;   // "bf16" or "bf16,g128": dtypes and modes, in spec order
  const char* spec;  // "n4096" or "any"
  const char* arch;  // "sm_90a": the arch this entry serves ("compute_80": PTX)
  int32_t arch_major;
  int32_t arch_minor;
  ArchKind arch_kind;
  int32_t blob;  // index into kBlobs
  int32_t n_tensors;
  const int32_t* ndims;  // rank of each tensor; shapes arrive concatenated
  int32_t n_scalars;
  int32_t n_dyn;          // dynamic sizes written by `match` (at most kMaxDyn)
  const char* signature;  // "x[M,4096] weight[4096] y[M,4096]; eps | M%1" for messages
  MatchFn match;
  int32_t n_kernels;
  const char* const* kernel_names;  // entry symbols in the cubin, in launch order
  LaunchFn launch;
  const char* const* tensor_names;  // parameter name of each tensor ("x", "weight", ...)
  const uint32_t* tensor_dtypes;    // DLPack dtype of each tensor: code | bits << 8 | lanes << 16
};

// Sorted by (op, key, specialised-before-generic, arch descending, PTX last); the runtime takes
// the first matching row of the best-ranked arch that runs (select.h).
extern const Variant kVariants[];
extern const int32_t kNumVariants;
extern const Blob kBlobs[];
extern const int32_t kNumBlobs;
extern const char* const kBuildArchs;  // "sm_70,sm_75,..." as configured
extern const char* const kBuildOps;    // ops filter as configured ("*" for all)

// Sets this thread's tileaot_last_error/status and returns `status`: for generated C ABI code
// (gen/workspace.cpp's tileaot_workspace_size).
int set_error(int status, std::string message);

}  // namespace tileaot::detail
