// What the fake libcuda.so.1 (fake_cuda.cpp) records, for test_runtime.cpp to check.
#pragma once

#include <cstdint>

struct FakeLaunch {
  unsigned grid[3], block[3], smem;
  void* stream;
  void* fn;
  void* ctx;  // context current at launch
  int n_attrs;
  int attr_ids[4];
  int pdl, cooperative;
  unsigned cluster[3];
};

struct FakeCudaState {
  int init_calls, proc_address_calls, retains, pushes, pops;
  int module_loads, get_functions, set_attrs, last_set_attr_value, encodes, last_encode_rank;
  int n_launches;
  FakeLaunch launches[256];
  int fail_launch;       // status cuLaunchKernelEx returns (0: success)
  int fail_module_load;  // status cuModuleLoadData returns (0: success)
  int load_delay_us;     // cuModuleLoadData sleeps this long (widens races in tests)
  int last_image_size;   // bytes of the last image cuModuleLoadData read (text: to its NUL)
  char last_image[128];  // its first bytes, NUL-terminated
  int ptx_loads;         // images read as PTX (".target sm_XX", JIT-compiled by a real driver)
};

extern "C" FakeCudaState* fake_cuda_state();
extern "C" void* fake_cuda_primary_ctx(int device);
// For tests without this header (Python through ctypes): a counter or setting by its field name
// ("module_loads", "fail_launch", ...; -1 if unknown), and the device of launch i's context and
// its stream (launches are kept in a ring of 256).
extern "C" int fake_cuda_get(const char* field);
extern "C" int fake_cuda_set(const char* field, int value);
extern "C" int fake_cuda_launch_device(int i);
extern "C" long long fake_cuda_launch_stream(int i);
