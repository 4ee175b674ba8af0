#include "select.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "tileaot/tileaot.h"

namespace tileaot::detail {
namespace {

bool same_group(const Variant& a, const Variant& b) {
  return std::strcmp(a.op, b.op) == 0 && std::strcmp(a.key, b.key) == 0;
}

// Preference of an arch among those that run on one device (SASS rows share its major): higher
// minor first, then "a" before "f" before plain at the same major.minor; PTX below every SASS
// row (python/tileaot/_arch.py's Target.rank, the same numbers), or above as the policy says.
int arch_rank(const Variant& v, const PtxPolicy& policy) {
  if (v.arch_kind == kArchPtx) {
    const int version = v.arch_major * 10 + v.arch_minor;
    const bool preferred =
        policy.mode == PtxPolicy::kPrefer &&
        (policy.prefer_version == 0 || policy.prefer_version == version);
    return (preferred ? 2000 : 0) + version;
  }
  const int kind = v.arch_kind == kArchSpecific ? 2 : v.arch_kind == kArchFamily ? 1 : 0;
  return 1000 + v.arch_minor * 3 + kind;
}

// The best rank below `below` among the group's rows that run on major.minor; -1 if none.
int next_rank(const Group& g, int major, int minor, int below, const PtxPolicy& policy) {
  int best = -1;
  for (int32_t i = g.begin; i < g.end; ++i) {
    const Variant& v = kVariants[i];
    const int rank = arch_rank(v, policy);
    if (rank < below && rank > best && arch_runs_on(v, major, minor, policy)) best = rank;
  }
  return best;
}

// First row of the given arch rank whose pattern accepts the shapes; -1 if none.
int32_t first_match(const Group& g, int major, int minor, int rank, const int64_t* shapes,
                    int64_t* dyn, const PtxPolicy& policy) {
  for (int32_t i = g.begin; i < g.end; ++i) {
    const Variant& v = kVariants[i];
    if (arch_rank(v, policy) != rank || !arch_runs_on(v, major, minor, policy)) continue;
    // A row with more dynamic sizes than the buffer holds would overflow `dyn`: never match.
    if (v.n_dyn > kMaxDyn || shape_count(v) != shape_count(kVariants[g.begin])) continue;
    if (v.match(shapes, dyn)) return i;
  }
  return -1;
}

// ends[i]: one past the last row of the group that starts at row i; -1 if no group starts
// there. Worked out once: every launch asks, and a wheel's groups hold dozens of rows.
const std::vector<int32_t>& group_ends() {
  static const std::vector<int32_t> ends = [] {
    std::vector<int32_t> e(static_cast<size_t>(kNumVariants), -1);
    for (int32_t i = 0; i < kNumVariants;) {
      int32_t j = i + 1;
      while (j < kNumVariants && same_group(kVariants[i], kVariants[j])) ++j;
      e[static_cast<size_t>(i)] = j;
      i = j;
    }
    return e;
  }();
  return ends;
}

}  // namespace

bool group_of(int32_t handle, Group* group) {
  if (handle < 0 || handle >= kNumVariants) return false;
  const int32_t end = group_ends()[static_cast<size_t>(handle)];
  if (end < 0) return false;  // a row inside a group, not a handle
  *group = {handle, end};
  return true;
}

int32_t lookup_group(const char* op, const char* key, std::string* error) {
  for (int32_t i = 0; i < kNumVariants; ++i) {
    const Variant& v = kVariants[i];
    if (std::strcmp(v.op, op) == 0 && std::strcmp(v.key, key) == 0) return i;
  }
  *error = lookup_miss_message(op, key);
  return -1;
}

int32_t shape_count(const Variant& v) {
  int32_t n = 0;
  for (int32_t t = 0; t < v.n_tensors; ++t) n += v.ndims[t];
  return n;
}

PtxPolicy parse_ptx_policy(const char* text) {
  PtxPolicy p;
  const std::string s = text == nullptr ? "" : text;
  if (s.empty() || s == "auto") return p;
  if (s == "off" || s == "0") {
    p.mode = PtxPolicy::kOff;
    return p;
  }
  if (s == "prefer") {
    p.mode = PtxPolicy::kPrefer;
    return p;
  }
  // "prefer:80", "prefer:sm_80", "prefer:compute_80"
  std::string arch = s.rfind("prefer:", 0) == 0 ? s.substr(7) : "";
  for (const char* prefix : {"compute_", "sm_"}) {
    if (arch.rfind(prefix, 0) == 0) arch = arch.substr(std::strlen(prefix));
  }
  if (arch.size() >= 2 && arch.size() <= 3 &&
      arch.find_first_not_of("0123456789") == std::string::npos) {
    p.mode = PtxPolicy::kPrefer;
    p.prefer_version = std::atoi(arch.c_str());
    return p;
  }
  p.error = "tileaot: TILEAOT_PTX='" + s +
            "' is not one of auto (PTX only where no SASS fits; the default), off (never: a "
            "miss instead), prefer (PTX before SASS), prefer:80 (the compute_80 PTX first)";
  return p;
}

const PtxPolicy& ptx_policy() {
  static const PtxPolicy policy = parse_ptx_policy(std::getenv("TILEAOT_PTX"));
  return policy;
}

bool arch_runs_on(const Variant& v, int major, int minor, const PtxPolicy& policy) {
  if (v.arch_kind == kArchPtx) {
    return policy.mode != PtxPolicy::kOff &&
           (major > v.arch_major || (major == v.arch_major && minor >= v.arch_minor));
  }
  if (v.arch_major != major) return false;
  return v.arch_kind == kArchSpecific ? v.arch_minor == minor : v.arch_minor <= minor;
}

std::string arch_name(int major, int minor) {
  std::string name = "sm_" + std::to_string(major) + std::to_string(minor);
  if ((major == 9 || major == 10) && minor == 0) name += "a";
  return name;
}

int select_for_arch(int32_t handle, int major, int minor, const int64_t* shapes, int32_t n_shapes,
                    int64_t* dyn, int32_t* row, std::string* error, int device,
                    const PtxPolicy& policy) {
  if (!policy.error.empty()) {
    *error = policy.error;
    return TILEAOT_ERROR_INVALID;
  }
  Group g;
  if (!group_of(handle, &g)) {
    *error = "tileaot: invalid handle " + std::to_string(handle) + " (use tileaot_lookup)";
    return TILEAOT_ERROR_INVALID;
  }
  const Variant& first = kVariants[g.begin];
  if (n_shapes != shape_count(first) || (n_shapes > 0 && shapes == nullptr)) {
    *error = std::string("tileaot: ") + first.op + "[" + first.key + "] takes " +
             std::to_string(shape_count(first)) + " shape values (the tensors' dims, " +
             "concatenated: " + first.signature + "), got " + std::to_string(n_shapes);
    return TILEAOT_ERROR_INVALID;
  }
  for (int rank = next_rank(g, major, minor, 1 << 30, policy); rank >= 0;
       rank = next_rank(g, major, minor, rank, policy)) {
    const int32_t i = first_match(g, major, minor, rank, shapes, dyn, policy);
    if (i >= 0) {
      *row = i;
      return TILEAOT_OK;
    }
  }
  *error = select_miss_message(g, major, minor, shapes, device, policy);
  return TILEAOT_ERROR_MISS;
}

}  // namespace tileaot::detail
