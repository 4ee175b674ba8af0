// Variant lookup and selection over the generated table (registry.h). Pure: no driver calls,
// so all of it is testable without a GPU (tests_native/).
#pragma once

#include <cstdint>
#include <string>

#include "registry.h"

namespace tileaot::detail {

// Rows [begin, end) of one op+key; `begin` is the handle tileaot_lookup returns.
struct Group {
  int32_t begin;
  int32_t end;
};

// The group whose first row is `handle`; false if `handle` is not such a row.
bool group_of(int32_t handle, Group* group);

// Handle of op+key, or -1 with *error naming what is built and how to add the rest.
int32_t lookup_group(const char* op, const char* key, std::string* error);

// Sum of the variant's tensor ranks: the length of the concatenated shape array.
int32_t shape_count(const Variant& v);

// How dispatch treats PTX rows (kArchPtx), from TILEAOT_PTX: "auto" (default) only when no
// SASS row fits the call; "off" never (a miss instead); "prefer" before any SASS; "prefer:80"
// the compute_80 PTX before any SASS (the PTX test mode: scripts/gpu_check.sh tests_ptx).
struct PtxPolicy {
  enum Mode { kAuto, kOff, kPrefer } mode = kAuto;
  int prefer_version = 0;  // kPrefer: only PTX of this compute version first (0: any)
  std::string error;       // non-empty: the setting was not understood (every launch fails)
};

// Parses a TILEAOT_PTX value (nullptr or "": auto).
PtxPolicy parse_ptx_policy(const char* text);
// The process's policy: TILEAOT_PTX, read once at first use.
const PtxPolicy& ptx_policy();

// DESIGN.md "Must hold" 3: an "a" arch runs only on exactly its major.minor; a plain or family
// ("f") arch on the same major with a minor no higher than the device's; PTX (unless the
// policy is off) on any device of its compute capability or newer, through the driver's JIT.
bool arch_runs_on(const Variant& v, int major, int minor, const PtxPolicy& policy = ptx_policy());

// "sm_89"; the arch-specific form "sm_90a"/"sm_100a" for 9.0 and 10.0 (the names nvcc users
// know these devices by).
std::string arch_name(int major, int minor);

// Picks the row for a call on a device of compute capability major.minor: the best-ranked arch
// among the group's rows that run there (highest minor; "a" before "f" before plain at equal
// major.minor; PTX after all SASS, or before it as the policy says), then the first row of
// that arch whose pattern matches; failing that, the next arch, and so on.
// On success returns TILEAOT_OK, *row and the dynamic sizes in dyn[kMaxDyn]; otherwise
// TILEAOT_ERROR_INVALID (bad handle or shape count, bad TILEAOT_PTX) or TILEAOT_ERROR_MISS,
// with *error set. `device` only labels the message (-1: no device, e.g. in tests).
int select_for_arch(int32_t handle, int major, int minor, const int64_t* shapes, int32_t n_shapes,
                    int64_t* dyn, int32_t* row, std::string* error, int device = -1,
                    const PtxPolicy& policy = ptx_policy());

// The one-line warning printed (once per op+key and process) when a call runs PTX: that the
// driver JIT-compiles it, why it was chosen, how to turn it off. PTX warnings printed so far.
std::string ptx_warning(const Variant& v, int device, const std::string& device_arch,
                        const PtxPolicy& policy = ptx_policy());
int ptx_warning_count();

// Miss messages (messages.cpp): what was asked, what is built, which build option adds it.
std::string lookup_miss_message(const char* op, const char* key);
std::string select_miss_message(const Group& group, int major, int minor, const int64_t* shapes,
                                int device, const PtxPolicy& policy = ptx_policy());

}  // namespace tileaot::detail
