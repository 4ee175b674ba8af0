// What the fake libamdhip64 (fake_hip.cpp) records, for test_hip_runtime.cpp to check.
#pragma once

struct FakeHipLaunch {
  unsigned grid[3], block[3], smem;
  void* stream;
  char kernel[64];
  void* arg0;  // the first kernel argument, read as a pointer
};

struct FakeHipState {
  int init_calls, module_loads, get_functions;
  int n_launches;
  FakeHipLaunch launches[64];
  int fail_launch;       // status hipModuleLaunchKernel returns (0: success)
  int fail_module_load;  // status hipModuleLoadData returns (0: success)
};

extern "C" FakeHipState* fake_hip_state();
