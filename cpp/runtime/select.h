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

// DESIGN.md "Must hold" 3: an "a" arch runs only on exactly its major.minor; a plain arch on
// the same major with a minor no higher than the device's.
bool arch_runs_on(const Variant& v, int major, int minor);

// "sm_89"; the arch-specific form "sm_90a"/"sm_100a" for 9.0 and 10.0, the SASS targets that
// have wgmma/tcgen05 and that this project builds as "a" archs.
std::string arch_name(int major, int minor);

// Picks the row for a call on a device of compute capability major.minor: the highest arch
// among the group's rows that run there ("a" before plain at equal major.minor), then the first
// row of that arch whose pattern matches; failing that, the next lower arch, and so on.
// On success returns TILEAOT_OK, *row and the dynamic sizes in dyn[kMaxDyn]; otherwise
// TILEAOT_ERROR_INVALID (bad handle or shape count) or TILEAOT_ERROR_MISS, with *error set.
// `device` only labels the message (-1: no device, e.g. in tests).
int select_for_arch(int32_t handle, int major, int minor, const int64_t* shapes, int32_t n_shapes,
                    int64_t* dyn, int32_t* row, std::string* error, int device = -1);

// Miss messages (messages.cpp): what was asked, what is built, which build option adds it.
std::string lookup_miss_message(const char* op, const char* key);
std::string select_miss_message(const Group& group, int major, int minor, const int64_t* shapes,
                                int device);

}  // namespace tileaot::detail
