// A fake libcuda.so.1 for testing the runtime without a GPU: devices from FAKE_CUDA_SM
// ("8.9,9.0,9.0"), contexts as a thread-local stack, "cubins" that are text lists of kernel names
// prefixed by their arch, or real cubins (ELF; arch from the header, kernels from the symbol
// names), so a real wheel's library runs against it too. Loading an image on a device it cannot
// run on fails as the driver would; so does launching a function in another device's context.
// Kernels are never run: every call is recorded in FakeCudaState. FAKE_CUDA_INIT_FAIL=1 makes
// cuInit fail; FAKE_CUDA_NO_PROC=1 makes cuGetProcAddress_v2 find nothing (tests the dlsym
// fallback).
#include "fake_cuda.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

FakeCudaState g_state;
std::mutex g_mu;
thread_local std::vector<void*> t_ctx_stack;
struct Device {
  int major, minor;
};
std::vector<Device> g_devices;
char g_ctx[16];  // primary context i is &g_ctx[i]

struct Module {
  std::string image;  // text, or the ELF bytes of a cubin
  int device;
};
struct Function {
  std::string name;
  int device;  // of its module: a launch in another device's context fails
};

void load_devices() {
  const char* env = std::getenv("FAKE_CUDA_SM");
  std::string spec = env ? env : "8.9,9.0,9.0";
  for (size_t pos = 0; pos < spec.size();) {
    Device d{};
    std::sscanf(spec.c_str() + pos, "%d.%d", &d.major, &d.minor);
    g_devices.push_back(d);
    size_t comma = spec.find(',', pos);
    pos = comma == std::string::npos ? spec.size() : comma + 1;
  }
}

int current_device() {
  if (t_ctx_stack.empty()) return -1;
  return static_cast<int>(static_cast<char*>(t_ctx_stack.back()) - g_ctx);
}

bool is_elf(const void* image) {
  return std::memcmp(image,
                     "\x7f"
                     "ELF",
                     4) == 0;
}

uint64_t read_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// The length of an ELF64 image: its section or program header table, whichever ends last (the
// cubins nvcc and NVRTC write end with one of them).
size_t elf_size(const unsigned char* e) {
  const uint64_t sections = read_le(e + 0x28, 8) + read_le(e + 0x3A, 2) * read_le(e + 0x3C, 2);
  const uint64_t programs = read_le(e + 0x20, 8) + read_le(e + 0x36, 2) * read_le(e + 0x38, 2);
  return static_cast<size_t>(sections > programs ? sections : programs);
}

// The SM of a cubin from e_flags, as cuobjdump shows it: CUDA ELF ABI version 7 (sm_7x..sm_90a)
// keeps the SM in bits 0-7 and the "a" (arch-specific) flag in bit 11; version 8 (sm_100 on)
// keeps the SM in bits 8-15 (its "a" flag is not decoded: treated as arch-specific).
bool elf_arch(const unsigned char* e, int* sm, bool* specific) {
  const uint64_t flags = read_le(e + 48, 4);
  if (e[8] == 7) {
    *sm = static_cast<int>(flags & 0xff);
    *specific = (flags & 0x800) != 0;
  } else {
    *sm = static_cast<int>(flags >> 8 & 0xff);
    *specific = true;
  }
  return *sm > 0;
}

// Whether an image for `arch` ("sm_90a", "sm_80") runs on the device, as for real SASS.
bool image_runs_on(const std::string& image, const Device& d) {
  int number = 0;
  bool specific = false;
  const auto* bytes = reinterpret_cast<const unsigned char*>(image.data());
  const size_t target = image.find(".target sm_");
  if (!is_elf(bytes) && target != std::string::npos) {  // PTX: the JIT serves newer devices
    if (std::sscanf(image.c_str() + target, ".target sm_%d", &number) != 1) return false;
    ++g_state.ptx_loads;
    return d.major * 10 + d.minor >= number;
  }
  if (is_elf(bytes)) {
    if (!elf_arch(bytes, &number, &specific)) return false;
  } else {
    if (std::sscanf(image.c_str(), "sm_%d", &number) != 1) return false;
    specific = image.find("a:") != std::string::npos;
  }
  const int major = number / 10, minor = number % 10;
  return major == d.major && (specific ? minor == d.minor : minor <= d.minor);
}

// Whether the image has a kernel `name`: a word of the text list, or a NUL-delimited string of
// the cubin (its symbol names).
bool has_kernel(const std::string& image, const char* name) {
  if (!is_elf(image.data())) return image.find(std::string(" ") + name) != std::string::npos;
  const std::string symbol = std::string(1, '\0') + name + '\0';
  return image.find(symbol) != std::string::npos;
}

}  // namespace

extern "C" {

using CUresult = int;

FakeCudaState* fake_cuda_state() { return &g_state; }
void* fake_cuda_primary_ctx(int device) { return &g_ctx[device]; }

static int* fake_cuda_field(const char* field) {
  struct Field {
    const char* name;
    int* value;
  };
  const Field fields[] = {
      {"init_calls", &g_state.init_calls},
      {"retains", &g_state.retains},
      {"pushes", &g_state.pushes},
      {"pops", &g_state.pops},
      {"module_loads", &g_state.module_loads},
      {"ptx_loads", &g_state.ptx_loads},
      {"get_functions", &g_state.get_functions},
      {"n_launches", &g_state.n_launches},
      {"fail_launch", &g_state.fail_launch},
      {"fail_module_load", &g_state.fail_module_load},
      {"load_delay_us", &g_state.load_delay_us},
  };
  for (const Field& f : fields) {
    if (std::strcmp(f.name, field) == 0) return f.value;
  }
  return nullptr;
}

int fake_cuda_get(const char* field) {
  std::lock_guard<std::mutex> lock(g_mu);
  const int* value = fake_cuda_field(field);
  return value ? *value : -1;
}

int fake_cuda_set(const char* field, int value) {
  std::lock_guard<std::mutex> lock(g_mu);
  int* slot = fake_cuda_field(field);
  if (slot == nullptr) return -1;
  __atomic_store_n(slot, value, __ATOMIC_RELAXED);
  return 0;
}

int fake_cuda_launch_device(int i) {
  std::lock_guard<std::mutex> lock(g_mu);
  return static_cast<int>(static_cast<char*>(g_state.launches[i % 256].ctx) - g_ctx);
}

long long fake_cuda_launch_stream(int i) {
  std::lock_guard<std::mutex> lock(g_mu);
  return static_cast<long long>(reinterpret_cast<uintptr_t>(g_state.launches[i % 256].stream));
}

CUresult cuInit(unsigned int) {
  ++g_state.init_calls;
  if (std::getenv("FAKE_CUDA_INIT_FAIL")) return 100;
  load_devices();
  return 0;
}

CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return 0;
}

CUresult cuGetErrorName(CUresult e, const char** s) {
  switch (e) {
    case 0:
      *s = "CUDA_SUCCESS";
      return 0;
    case 1:
      *s = "CUDA_ERROR_INVALID_VALUE";
      return 0;
    case 100:
      *s = "CUDA_ERROR_NO_DEVICE";
      return 0;
    case 2:
      *s = "CUDA_ERROR_OUT_OF_MEMORY";
      return 0;
    case 201:
      *s = "CUDA_ERROR_INVALID_CONTEXT";
      return 0;
    case 400:
      *s = "CUDA_ERROR_INVALID_HANDLE";
      return 0;
    case 209:
      *s = "CUDA_ERROR_NO_BINARY_FOR_GPU";
      return 0;
    case 200:
      *s = "CUDA_ERROR_INVALID_IMAGE";
      return 0;
    case 500:
      *s = "CUDA_ERROR_NOT_FOUND";
      return 0;
    case 701:
      *s = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
      return 0;
  }
  *s = nullptr;
  return 1;
}

CUresult cuGetErrorString(CUresult e, const char** s) {
  switch (e) {
    case 100:
      *s = "no CUDA-capable device is detected";
      return 0;
    case 2:
      *s = "out of memory";
      return 0;
    case 209:
      *s = "no kernel image is available for execution on the device";
      return 0;
    case 200:
      *s = "device kernel image is invalid";
      return 0;
    case 400:
      *s = "invalid resource handle";
      return 0;
    case 701:
      *s = "too many resources requested for launch";
      return 0;
  }
  *s = "fake error";
  return 0;
}

CUresult cuDeviceGetCount(int* n) {
  *n = static_cast<int>(g_devices.size());
  return 0;
}

CUresult cuDeviceGet(int* d, int ordinal) {
  *d = ordinal;
  return 0;
}

CUresult cuDeviceGetAttribute(int* v, int attr, int d) {
  if (attr == 75)
    *v = g_devices[d].major;
  else if (attr == 76)
    *v = g_devices[d].minor;
  else
    return 1;
  return 0;
}

CUresult cuDevicePrimaryCtxRetain(void** ctx, int d) {
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_state.retains;
  *ctx = &g_ctx[d];
  return 0;
}

CUresult cuCtxGetCurrent(void** ctx) {
  *ctx = t_ctx_stack.empty() ? nullptr : t_ctx_stack.back();
  return 0;
}

CUresult cuCtxPushCurrent_v2(void* ctx) {
  __atomic_add_fetch(&g_state.pushes, 1, __ATOMIC_RELAXED);
  t_ctx_stack.push_back(ctx);
  return 0;
}

CUresult cuCtxPopCurrent_v2(void** ctx) {
  if (t_ctx_stack.empty()) return 201;
  __atomic_add_fetch(&g_state.pops, 1, __ATOMIC_RELAXED);
  *ctx = t_ctx_stack.back();
  t_ctx_stack.pop_back();
  return 0;
}

CUresult cuModuleLoadData(void** module, const void* image) {
  const int dev = current_device();
  if (dev < 0) return 201;
  // Outside the lock: two loads racing in the runtime would overlap here.
  const int delay_us = __atomic_load_n(&g_state.load_delay_us, __ATOMIC_RELAXED);
  if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_state.module_loads;
  if (g_state.fail_module_load) return g_state.fail_module_load;
  const auto* bytes = static_cast<const unsigned char*>(image);
  const std::string copy = is_elf(bytes)
                               ? std::string(static_cast<const char*>(image), elf_size(bytes))
                               : std::string(static_cast<const char*>(image));
  g_state.last_image_size = static_cast<int>(copy.size());
  std::snprintf(g_state.last_image, sizeof(g_state.last_image), "%s", copy.c_str());
  if (!image_runs_on(copy, g_devices[dev])) return 209;
  *module = new Module{copy, dev};
  return 0;
}

CUresult cuModuleGetFunction(void** fn, void* module, const char* name) {
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_state.get_functions;
  const Module& m = *static_cast<Module*>(module);
  if (!has_kernel(m.image, name)) return 500;
  *fn = new Function{name, m.device};
  return 0;
}

CUresult cuFuncSetAttribute(void*, int attr, int value) {
  if (attr != 8) return 1;
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_state.set_attrs;
  g_state.last_set_attr_value = value;
  return 0;
}

// The fake reads attributes by the real layout (72-byte entries, value at offset 8).
CUresult cuLaunchKernelEx(const unsigned* config, void* fn, void** params, void** extra) {
  if (current_device() < 0) return 201;
  if (params == nullptr || extra != nullptr) return 1;
  if (static_cast<Function*>(fn)->device != current_device()) return 400;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state.fail_launch) return g_state.fail_launch;
  FakeLaunch& l = g_state.launches[g_state.n_launches++ % 256];
  l = FakeLaunch{};
  std::memcpy(l.grid, config, 12);
  std::memcpy(l.block, config + 3, 12);
  l.smem = config[6];
  const char* base = reinterpret_cast<const char*>(config);
  std::memcpy(&l.stream, base + 32, 8);
  const char* attrs = nullptr;
  std::memcpy(&attrs, base + 40, 8);
  std::memcpy(&l.n_attrs, base + 48, 4);
  l.fn = fn;
  l.ctx = t_ctx_stack.back();
  for (int i = 0; i < l.n_attrs && i < 4; ++i) {
    const char* a = attrs + 72 * i;
    std::memcpy(&l.attr_ids[i], a, 4);
    if (l.attr_ids[i] == 6) std::memcpy(&l.pdl, a + 8, 4);
    if (l.attr_ids[i] == 2) std::memcpy(&l.cooperative, a + 8, 4);
    if (l.attr_ids[i] == 4) std::memcpy(l.cluster, a + 8, 12);
  }
  return 0;
}

CUresult cuTensorMapEncodeTiled(void* map, int, unsigned rank, void*, const uint64_t*,
                                const uint64_t*, const unsigned*, const unsigned*, int, int, int,
                                int) {
  if (reinterpret_cast<uintptr_t>(map) % 64 != 0) return 1;
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_state.encodes;
  g_state.last_encode_rank = static_cast<int>(rank);
  std::memset(map, 0xab, 128);
  return 0;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** fn, int version, uint64_t, int* status) {
  ++g_state.proc_address_calls;
  *fn = nullptr;
  if (std::getenv("FAKE_CUDA_NO_PROC") || version != 12000) return 500;
  struct Entry {
    const char* name;
    void* fn;
  };
  static const Entry kEntries[] = {
      {"cuDeviceGetCount", reinterpret_cast<void*>(cuDeviceGetCount)},
      {"cuDeviceGet", reinterpret_cast<void*>(cuDeviceGet)},
      {"cuDeviceGetAttribute", reinterpret_cast<void*>(cuDeviceGetAttribute)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(cuDevicePrimaryCtxRetain)},
      {"cuCtxGetCurrent", reinterpret_cast<void*>(cuCtxGetCurrent)},
      {"cuCtxPushCurrent", reinterpret_cast<void*>(cuCtxPushCurrent_v2)},
      {"cuCtxPopCurrent", reinterpret_cast<void*>(cuCtxPopCurrent_v2)},
      {"cuModuleLoadData", reinterpret_cast<void*>(cuModuleLoadData)},
      {"cuModuleGetFunction", reinterpret_cast<void*>(cuModuleGetFunction)},
      {"cuFuncSetAttribute", reinterpret_cast<void*>(cuFuncSetAttribute)},
      {"cuLaunchKernelEx", reinterpret_cast<void*>(cuLaunchKernelEx)},
      {"cuTensorMapEncodeTiled", reinterpret_cast<void*>(cuTensorMapEncodeTiled)},
  };
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.name, symbol) == 0) {
      *fn = e.fn;
      if (status) *status = 0;
      return 0;
    }
  }
  if (status) *status = 1;
  return 500;
}

}  // extern "C"
