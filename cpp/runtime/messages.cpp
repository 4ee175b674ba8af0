// Miss messages (DESIGN.md "Must hold" 6): name the op, the key, what this build has, and the
// build option that would add what was asked for.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "select.h"

namespace tileaot::detail {
namespace {

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : sep) + item;
  return out;
}

void add_unique(std::vector<std::string>* items, const char* item) {
  if (std::find(items->begin(), items->end(), item) == items->end()) items->push_back(item);
}

std::vector<std::string> built_ops() {
  std::vector<std::string> ops;
  for (int32_t i = 0; i < kNumVariants; ++i) add_unique(&ops, kVariants[i].op);
  return ops;
}

std::vector<std::string> built_keys(const char* op) {
  std::vector<std::string> keys;
  for (int32_t i = 0; i < kNumVariants; ++i) {
    if (std::strcmp(kVariants[i].op, op) == 0) add_unique(&keys, kVariants[i].key);
  }
  return keys;
}

bool op_filtered() { return std::strcmp(kBuildOps, "*") != 0; }

// kBuildArchs ("sm_80,sm_90a") as a TILEAOT_ARCHS value ("80,90a"; CMake takes ',' or ';').
std::string archs_option_value() {
  std::string out;
  for (const char* p = kBuildArchs; *p != '\0'; ++p) {
    if (std::strncmp(p, "sm_", 3) == 0) {
      p += 2;
    } else {
      out += *p;
    }
  }
  return out;
}

// Whether any arch of the build (not just of this op+key) runs on major.minor.
bool build_has_arch_for(int major, int minor) {
  std::string archs = std::string(kBuildArchs) + ",";
  for (size_t start = 0, comma; (comma = archs.find(',', start)) != std::string::npos;
       start = comma + 1) {
    const std::string arch = archs.substr(start, comma - start);
    int number = 0;
    if (std::sscanf(arch.c_str(), "sm_%d", &number) != 1) continue;
    const bool specific = arch.back() == 'a';
    const int a_major = number / 10, a_minor = number % 10;
    if (a_major == major && (specific ? a_minor == minor : a_minor <= minor)) return true;
  }
  return false;
}

std::string shapes_text(const Variant& v, const int64_t* shapes) {
  std::vector<std::string> tensors;
  for (int32_t t = 0, k = 0; t < v.n_tensors; ++t) {
    std::vector<std::string> dims;
    for (int32_t d = 0; d < v.ndims[t]; ++d) dims.push_back(std::to_string(shapes[k++]));
    tensors.push_back("(" + join(dims, ", ") + (dims.size() == 1 ? ",)" : ")"));
  }
  return join(tensors, ", ");
}

// The group's archs, best first as the table orders them.
std::vector<std::string> group_archs(const Group& g) {
  std::vector<std::string> archs;
  for (int32_t i = g.begin; i < g.end; ++i) add_unique(&archs, kVariants[i].arch);
  return archs;
}

// One line per variant name: "  rms_norm_bf16_any (sm_90a, sm_80): x[M,N] w[N] y[M,N]; eps".
std::string variant_lines(const Group& g) {
  std::vector<std::string> names;
  for (int32_t i = g.begin; i < g.end; ++i) add_unique(&names, kVariants[i].name);
  std::string out;
  for (const std::string& name : names) {
    std::vector<std::string> archs;
    const char* signature = "";
    for (int32_t i = g.begin; i < g.end; ++i) {
      if (name != kVariants[i].name) continue;
      add_unique(&archs, kVariants[i].arch);
      signature = kVariants[i].signature;
    }
    out += "\n  " + name + " (" + join(archs, ", ") + "): " + signature;
  }
  return out;
}

bool any_row_runs_on(const Group& g, int major, int minor, const PtxPolicy& policy) {
  for (int32_t i = g.begin; i < g.end; ++i) {
    if (arch_runs_on(kVariants[i], major, minor, policy)) return true;
  }
  return false;
}

// Compute capabilities of 8.0 or newer that no SASS target of tileaot serves
// (python/tileaot/_arch.py BUILDABLE: majors 7, 8, 9, 10, 12): only PTX runs there.
bool no_sass_target_for(int major) { return major == 11 || major >= 13; }

std::string no_arch_reason(const Group& g, int major, int minor, const PtxPolicy& policy) {
  const std::string sm = arch_name(major, minor);
  const std::string archs = join(group_archs(g), ", ");
  const char* op = kVariants[g.begin].op;
  if (policy.mode == PtxPolicy::kOff && any_row_runs_on(g, major, minor, PtxPolicy{})) {
    return "None of its SASS archs (" + archs + ") runs on " + sm +
           ", and TILEAOT_PTX=off keeps its PTX (which the driver would JIT-compile) from "
           "running: unset TILEAOT_PTX to use it.";
  }
  if (no_sass_target_for(major)) {
    return "None of its archs (" + archs + ") runs on " + sm + ", and tileaot has no SASS " +
           "target for it: only PTX runs there, which this build has not for " + op +
           " (a build with sm_80 embeds its PTX unless -Ccmake.define.TILEAOT_PTX_ARCHS=off).";
  }
  if (build_has_arch_for(major, minor)) {
    return "None of its archs (" + archs + ") runs on " + sm + ". This build has an arch for " +
           sm + " (" + kBuildArchs + "), but " + op +
           "'s KernelSpec.supports leaves it out for this key: see the op's spec file in "
           "kernels_py/.";
  }
  std::string token = sm.substr(3);
  return "None of its archs (" + archs + ") runs on " + sm + ", and no arch of this build (" +
         kBuildArchs + ") does. Rebuild with -Ccmake.define.TILEAOT_ARCHS=\"" +
         archs_option_value() + "," + token + "\" to add " + sm + ".";
}

std::string no_match_reason(const Group& g, int major, int minor, const PtxPolicy& policy) {
  std::vector<std::string> archs;
  for (int32_t i = g.begin; i < g.end; ++i) {
    if (arch_runs_on(kVariants[i], major, minor, policy)) add_unique(&archs, kVariants[i].arch);
  }
  return "Its variants that run on " + arch_name(major, minor) + " (" + join(archs, ", ") +
         ") do not accept these shapes: a static size differs or a constraint after '|' fails. "
         "Check the shapes, or add a specialisation (KernelSpec.specs) or relax the constraints "
         "in the op's spec file in kernels_py/ and rebuild.";
}

}  // namespace

std::string ptx_warning(const Variant& v, int device, const std::string& device_arch,
                        const PtxPolicy& policy) {
  const std::string why = policy.mode == PtxPolicy::kPrefer
                              ? "TILEAOT_PTX=prefer" +
                                    (policy.prefer_version ? ":" + std::to_string(
                                                                       policy.prefer_version)
                                                           : std::string()) +
                                    " puts it before SASS"
                              : "no SASS of this build fits the device";
  return std::string("tileaot: warning: ") + v.op + "[" + v.key + "] runs PTX (" + v.arch +
         ") on device " + std::to_string(device) + " (" + device_arch + "): " + why +
         ", so the CUDA driver JIT-compiles it on first use (slower first call, no tuning for "
         "this GPU); TILEAOT_PTX=off makes this a miss instead.";
}

std::string lookup_miss_message(const char* op, const char* key) {
  const std::vector<std::string> keys = built_keys(op);
  const std::string filter =
      std::string(" (this build: -Ccmake.define.TILEAOT_OPS=\"") + kBuildOps + "\")";
  if (!keys.empty()) {
    std::string msg = std::string("tileaot: ") + op + " has no variants for key '" + key +
                      "' in this build; keys built: " + join(keys, ", ") +
                      ". Keys (dtypes and modes, comma-joined in the op's order) come from "
                      "KernelSpec.keys in the op's spec file in kernels_py/; add it there";
    if (op_filtered()) msg += ", or widen the ops filter" + filter;
    return msg + " and rebuild.";
  }
  std::string msg = std::string("tileaot: op '") + op +
                    "' is not in this build; ops built: " + join(built_ops(), ", ") + ".";
  if (op_filtered()) {
    // TILEAOT_OPS globs variant names, which start with "<op>_".
    return msg + " Rebuild with -Ccmake.define.TILEAOT_OPS=\"" + kBuildOps + "," + op +
           "_*\" (or \"*\" for every op in kernels_py/)" + filter + ".";
  }
  return msg + " This build has every op in kernels_py/; an op needs a spec file " +
         "kernels_py/<family>/" + op + ".py.";
}

std::string select_miss_message(const Group& g, int major, int minor, const int64_t* shapes,
                                int device, const PtxPolicy& policy) {
  const Variant& first = kVariants[g.begin];
  const std::string sm = arch_name(major, minor);
  const std::string where = device >= 0 ? "device " + std::to_string(device) + " (" + sm + ")" : sm;
  const bool any_arch = any_row_runs_on(g, major, minor, policy);
  std::string msg = std::string("tileaot: no ") + first.op + "[" + first.key +
                    "] variant for shapes " + shapes_text(first, shapes) + " on " + where + ". " +
                    (any_arch ? no_match_reason(g, major, minor, policy)
                              : no_arch_reason(g, major, minor, policy));
  return msg + "\nVariants of " + first.op + "[" + first.key +
         "] in this build:" + variant_lines(g);
}

}  // namespace tileaot::detail
